"""Mistral 4: DeepSeek-V3's MLA and experts (the tiny ones of ``deepseek.py``) with YaRN, Llama 4
query scaling that changes every 4 positions, and softmax routing over expert groups.

8 experts in 4 groups, top 3 over the 2 best groups: a third pick can fall in a masked
group, so the group mask bites. The rope is interleaved in the checkpoint (written out
de-interleaved) or rotated as halves.
"""

from transformers import AutoModelForCausalLM, Mistral4Config, Mistral4ForCausalLM

from .deepseek import tiny

# transformers 5.24 maps mistral4 to Mistral4ForCausalLM under image-text-to-text only (the
# hub's Mistral Small 4 is a mistral3 wrapper); the kit makes its model as a causal LM.
AutoModelForCausalLM.register(Mistral4Config, Mistral4ForCausalLM, exist_ok=True)


def rope(mscale_all_dim: float = 1.0) -> dict:
    return {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 4,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": mscale_all_dim,
        "llama_4_scaling_beta": 0.5,
    }


GROUPS = dict(n_group=4, topk_group=2, num_experts_per_tok=3)

CASES = {
    "mistral4": ("mistral4", tiny(**GROUPS, routed_scaling_factor=1.5, rope_parameters=rope())),
    "mistral4-no-q-lora-half-rope-no-norm": (
        "mistral4",
        tiny(
            **GROUPS,
            q_lora_rank=None,
            rope_interleave=False,
            norm_topk_prob=False,
            rope_parameters=rope(mscale_all_dim=0.707),
        ),
    ),
}
