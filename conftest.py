"""Test-wide setup: the reference image processors are transformers' PIL backends.

The test environment installs torchvision (timm needs it, and transformers builds Gemma 3n's
vision tower with timm). With torchvision present, transformers' Auto image processors pick
their torchvision backend, whose resizing differs from PIL's by a grey level here and there.
mobius's numpy processors follow the PIL backends (transformers' reference behaviour, and
what it uses without torchvision), so the tests compare against those: an Auto processor
asked for no backend gets the PIL one. A test that wants the torchvision backend asks for it
(``backend="torchvision"``).

Threads: every model in the tests is tiny, so PyTorch runs on one thread (``OMP_NUM_THREADS``,
set before anything imports torch, reaches subprocesses too) and ONNX Runtime's worker threads
sleep instead of spinning between runs. On two cores a spinning ORT pool and PyTorch's OpenMP
team wait for each other on every op of an interleaved torch/ORT parity loop; a tiny op then
costs milliseconds instead of microseconds. Neither setting changes what any op computes.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import onnxruntime as _ort  # noqa: E402
import pytest  # noqa: E402
import transformers.models.auto.image_processing_auto as _auto_image_processing  # noqa: E402

_resolve_backend = _auto_image_processing._resolve_backend


def _pil_unless_asked(backend, use_fast, base_class_name):
    if backend is None and use_fast is None:
        backend = "pil"
    return _resolve_backend(backend, use_fast, base_class_name)


_auto_image_processing._resolve_backend = _pil_unless_asked


_SPINNING = "session.intra_op.allow_spinning"


@pytest.fixture(scope="session", autouse=True)
def ort_threads_sleep_between_runs():
    """Every ``InferenceSession`` of the run: intra-op threads sleep between runs unless the
    test's session options say otherwise."""
    session_init = _ort.InferenceSession.__init__

    def without_spinning(self, path_or_bytes, sess_options=None, *args, **kwargs):
        if sess_options is None:
            sess_options = _ort.SessionOptions()
        try:
            sess_options.get_session_config_entry(_SPINNING)
        except RuntimeError:  # not set by the caller
            sess_options.add_session_config_entry(_SPINNING, "0")
        session_init(self, path_or_bytes, sess_options, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_ort.InferenceSession, "__init__", without_spinning)
        yield


def pytest_configure(config):
    """Torch imported before this file (by a plugin) still gets one thread."""
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
