"""MVP's decoder alone (``MvpForCausalLM``): BART's, with no prompts even when ``use_prompt``
is set (transformers builds the decoder without them), so the case sets it."""

from text_parity_cases.seq2seq_decoders import SEQ2SEQ

CASES = {
    "mvp-causal": (
        "mvp",
        {**SEQ2SEQ, "use_prompt": True, "prompt_length": 3, "prompt_mid_dim": 24},
        {"model_class": "MvpForCausalLM"},
    ),
}
