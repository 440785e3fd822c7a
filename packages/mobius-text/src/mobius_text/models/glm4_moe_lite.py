"""GLM-4-MoE-Lite (GLM-4.7-Flash): DeepSeek-V3 exactly, MLA and routing alike.

Its config names the dense/MoE layers per layer (``mlp_layer_types``), which the
normalised config reads; everything else is DeepSeek-V3's.
"""

from __future__ import annotations

from mobius_text.models.deepseek_v3 import DeepseekV3ForCausalLM

MODEL_TYPES = {"glm4_moe_lite": DeepseekV3ForCausalLM}
