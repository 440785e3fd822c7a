"""MiniCPM-OCR: MiniCPM-V 4.6's model under its own type, read at ``"4x"`` by default.

transformers subclasses MiniCPM-V 4.6's classes unchanged; the config differs in its
defaults (``downsample_mode="4x"``: no window merger, four times the tokens of 16x;
tied embeddings), which :class:`~.minicpmv4_6.MiniCPMV4_6Config` reads from the config
as it reads them for 4.6. The checkpoint's ``vit_merger`` is then unused and ignored.
"""

from __future__ import annotations

from mobius_vision.models.minicpmv4_6 import MiniCPMV4_6ForConditionalGeneration

MODEL_TYPES = {"minicpm_ocr": MiniCPMV4_6ForConditionalGeneration}
