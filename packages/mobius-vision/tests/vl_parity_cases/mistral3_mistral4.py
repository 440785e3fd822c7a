"""Mistral Small 4: Mistral 3's wrapper (Pixtral's tower, the merging projector) over a Mistral 4
decoder (DeepSeek-V3's MLA with Llama 4's query scale, softmax-routed fused experts).

The tiny MLA has distinct nope, rope and value head sizes; 8 experts in 4 groups, top 3
over the 2 best groups; the query scale changes every 4 positions. Two image sizes go
in one padded batch through the real ``PixtralProcessor`` (see ``mistral3.py``).
"""

from ._tiny import TEXT
from .mistral3 import PROMPTS, mistral3_config, mistral3_processor

MISTRAL4 = dict(
    TEXT,
    model_type="mistral4",
    num_key_value_heads=TEXT["num_attention_heads"],  # MLA expands the latent per head
    q_lora_rank=24,
    kv_lora_rank=16,
    qk_nope_head_dim=12,
    qk_rope_head_dim=8,
    v_head_dim=10,
    n_routed_experts=8,
    n_shared_experts=2,
    num_experts_per_tok=3,
    n_group=4,
    topk_group=2,
    moe_intermediate_size=32,
    first_k_dense_replace=1,
    rope_parameters={
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 4,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "llama_4_scaling_beta": 0.5,
    },
)

CASES = {
    "mistral3-mistral4-two-sizes": (
        "mistral3",
        mistral3_config(MISTRAL4),
        mistral3_processor(),
        dict(prompts=PROMPTS, image_sizes=((37, 45), (29, 21))),
    ),
}
