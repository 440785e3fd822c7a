"""Youtu-LLM: DeepSeek-V3's multi-head latent attention with a dense gated MLP in every layer.

Its config is DeepSeek-V3's without the MoE fields, so every layer is "dense";
embeddings are tied by default.
"""

from __future__ import annotations

from mobius_text.models.deepseek_v3 import DeepseekV3ForCausalLM

MODEL_TYPES = {"youtu": DeepseekV3ForCausalLM}
