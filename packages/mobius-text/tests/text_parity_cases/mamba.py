"""Mamba and Falcon-Mamba: selective state space with conv and ssm states.

``generate`` gives state-space models no attention mask after prefill; the
parity run does the same on the PyTorch side.
"""

SSM = dict(state_size=8, conv_kernel=4, expand=2, time_step_rank=8, layer_norm_epsilon=1e-5)
OPTIONS = {"decode_attention_mask": False}

CASES = {
    "mamba": ("mamba", SSM, OPTIONS),
    "mamba-untied-bias": (
        "mamba",
        dict(SSM, tie_word_embeddings=False, use_bias=True, use_conv_bias=True),
        OPTIONS,
    ),
    "falcon_mamba": ("falcon_mamba", dict(SSM, mixer_rms_eps=1e-6), OPTIONS),
}
