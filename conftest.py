"""Test-wide setup: the reference image processors are transformers' PIL backends.

The test environment installs torchvision (timm needs it, and transformers builds Gemma 3n's
vision tower with timm). With torchvision present, transformers' Auto image processors pick
their torchvision backend, whose resizing differs from PIL's by a grey level here and there.
mobius's numpy processors follow the PIL backends (transformers' reference behaviour, and
what it uses without torchvision), so the tests compare against those: an Auto processor
asked for no backend gets the PIL one. A test that wants the torchvision backend asks for it
(``backend="torchvision"``).
"""

import transformers.models.auto.image_processing_auto as _auto_image_processing

_resolve_backend = _auto_image_processing._resolve_backend


def _pil_unless_asked(backend, use_fast, base_class_name):
    if backend is None and use_fast is None:
        backend = "pil"
    return _resolve_backend(backend, use_fast, base_class_name)


_auto_image_processing._resolve_backend = _pil_unless_asked
