"""PP-Chart2Table (``pp_chart2table``): GOT-OCR 2.0's architecture under its own config type.

transformers builds it with ``GotOcr2ForConditionalGeneration`` (the SAM-style tower, the
conv projector, Qwen2), from a config whose tower type is ``pp_chart2table_vision`` with
GOT's fields; the GOT-OCR 2.0 build reads it unchanged.
"""

from __future__ import annotations

from mobius_vision.models.got_ocr2 import GotOcr2ForConditionalGeneration

MODEL_TYPES = {"pp_chart2table": GotOcr2ForConditionalGeneration}
