"""SmolVLM's vision tower: Idefics3's, under its own ``model_type`` (transformers subclasses it
unchanged)."""

from __future__ import annotations

from mobius_vision.models.idefics3_vision import Idefics3VisionModel

MODEL_TYPES = {"smolvlm_vision": Idefics3VisionModel}
