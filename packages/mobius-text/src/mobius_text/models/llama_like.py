"""Model types that compute exactly what Llama computes, with Llama's checkpoint names.

transformers' auto mapping sends ``internlm3`` and ``iquestcoder`` straight to its
``LlamaForCausalLM``; their configs only rename fields or change defaults, which the
normalised config already reads. ``cwm`` has its own classes, but they are Llama's
with nothing changed that the Llama graph does not already follow:

- ``internlm3``: Llama config with ``qkv_bias`` / ``bias`` aliases; q, k, v, o and the MLP
  share one bias setting, as in Llama.
- ``iquestcoder`` (IQuest-Coder): Llama config with other defaults (explicit ``head_dim``).
- ``cwm`` (Code World Model): Llama layers with Qwen2's bias-free attention (q, k, v, o
  without biases, as Llama's default) and a per-layer ``layer_types`` sliding-window
  pattern (every fourth layer full), which the Llama model's masks already follow.
"""

from __future__ import annotations

from mobius_text.models.llama import LlamaForCausalLM

MODEL_TYPES = {
    "internlm3": LlamaForCausalLM,
    "iquestcoder": LlamaForCausalLM,
    "cwm": LlamaForCausalLM,
}
