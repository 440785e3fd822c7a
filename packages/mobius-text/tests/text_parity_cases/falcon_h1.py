"""Falcon-H1: every µP multiplier away from one, mixer width ``mamba_d_ssm`` != expand * hidden,
chunk size 4 so PyTorch's prefill spans several SSD chunks, and the three mixer-norm variants."""

HYBRID = dict(
    mamba_d_ssm=96,  # not mamba_expand * hidden (128): the width comes from d_ssm
    mamba_n_heads=6,
    mamba_d_head=16,
    mamba_n_groups=2,
    mamba_d_state=8,
    mamba_d_conv=4,
    mamba_expand=2,
    mamba_chunk_size=4,
    embedding_multiplier=1.7,
    lm_head_multiplier=0.6,
    mlp_multipliers=[1.3, 0.7],
    key_multiplier=1.4,
    attention_in_multiplier=0.8,
    attention_out_multiplier=1.25,
    ssm_multipliers=[0.9, 1.2, 0.8, 1.5, 0.7],
    ssm_in_multiplier=1.1,
    ssm_out_multiplier=0.75,
)

CASES = {
    "falcon_h1": ("falcon_h1", HYBRID),
    "falcon_h1-norm-before-gate-biases": (
        "falcon_h1",
        dict(
            HYBRID,
            mamba_rms_norm=True,
            mamba_norm_before_gate=True,
            mamba_proj_bias=True,
            projectors_bias=True,
            attention_bias=True,
            mlp_bias=True,
        ),
    ),
    "falcon_h1-gate-then-norm-tied-dt-limit": (
        "falcon_h1",
        dict(
            HYBRID,
            mamba_rms_norm=True,
            mamba_norm_before_gate=False,
            tie_word_embeddings=True,
            time_step_limit=(0.2, 1.0),
        ),
    ),
}
