"""Model types transformers builds with its Llama classes: internlm3, iquestcoder, cwm."""

CASES = {
    "internlm3": ("internlm3", dict(head_dim=16)),
    # qkv_bias and bias must agree: both biases on, explicit head_dim.
    "internlm3-bias": ("internlm3", dict(head_dim=24, qkv_bias=True, bias=True)),
    "iquestcoder": ("iquestcoder", dict(head_dim=24)),
    # Window 4 < the prompt and decode length; layer 0 full, layer 1 sliding (HF's default pattern).
    "cwm": ("cwm", dict(head_dim=16, sliding_window=4)),
    "cwm-all-sliding-rope-default": (
        "cwm",
        dict(
            head_dim=16,
            sliding_window=3,
            layer_types=["sliding_attention", "sliding_attention"],
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
    ),
}
