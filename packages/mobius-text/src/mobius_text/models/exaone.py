"""EXAONE 3.0: the Llama architecture under GPT-2-style checkpoint names.

transformers builds ``exaone`` with ``LlamaForCausalLM`` and renames the
original checkpoint keys on load (``transformer.h.0.attn.attention.q_proj`` is
``model.layers.0.self_attn.q_proj``); it writes them back in that form on save,
so checkpoints on disk carry the EXAONE names. The graph keeps Llama's names and
:meth:`sanitize` applies the same renames.
"""

from __future__ import annotations

import re

from mobius_text.models.llama import LlamaForCausalLM

# The renames of transformers' conversion mapping for "exaone", in its order.
CHECKPOINT_RENAMES = (
    (r"^transformer\.wte\.", "model.embed_tokens."),
    (r"^transformer\.h\.", "model.layers."),
    (r"^transformer\.ln_f\.", "model.norm."),
    (r"\.attn\.attention\.", ".self_attn."),
    (r"\.self_attn\.out_proj\.", ".self_attn.o_proj."),
    (r"\.ln_1\.", ".input_layernorm."),
    (r"\.ln_2\.", ".post_attention_layernorm."),
    (r"\.mlp\.c_fc_0\.", ".mlp.gate_proj."),
    (r"\.mlp\.c_fc_1\.", ".mlp.up_proj."),
    (r"\.mlp\.c_proj\.", ".mlp.down_proj."),
)


def rename_checkpoint_key(name: str) -> str:
    for pattern, replacement in CHECKPOINT_RENAMES:
        name = re.sub(pattern, replacement, name)
    return name


class ExaoneForCausalLM(LlamaForCausalLM):
    """Llama reading EXAONE's checkpoint names (``transformer.h.*``, ``c_fc_0``...)."""

    def sanitize(self, weights: dict) -> dict:
        weights = {rename_checkpoint_key(name): tensor for name, tensor in weights.items()}
        return super().sanitize(weights)


MODEL_TYPES = {"exaone": ExaoneForCausalLM}
