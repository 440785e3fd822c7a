"""CLIP's text tower: causal layers, end-token pooling by either rule, the projection variant.

Rows end in the end-of-text token, as CLIP's tokenizer makes them; openai's
checkpoints pad with it too, so the first one is pooled, not the last. Besides the
pooled output, the kit compares ``penultimate_hidden_state`` with transformers'
``hidden_states[-2]`` (SDXL's conditioning); the one-layer case has the embeddings there.
"""

CLIP_TEXT = dict(bos_token_id=1, eos_token_id=3)
HEADS = ("none", "sentence-embedding")

CASES = {
    "clip_text_model": (
        "clip_text_model",
        CLIP_TEXT,
        dict(heads=HEADS, end_token_id=3, pad_token_id=3),
    ),
    # eos_token_id 2 is the legacy rule: the largest id of the row (the vocabulary's last).
    "clip_text_model-legacy-eos-argmax": (
        "clip_text_model",
        dict(CLIP_TEXT, eos_token_id=2, hidden_act="gelu", layer_norm_eps=1e-6),
        dict(heads=("none",), end_token_id=98, pad_token_id=0),
    ),
    # One layer: the penultimate state is the embeddings' output, before any layer.
    "clip_text_model-one-layer": (
        "clip_text_model",
        dict(CLIP_TEXT, num_hidden_layers=1),
        dict(heads=("none",), end_token_id=3, pad_token_id=3),
    ),
    "clip_text_model-with-projection": (
        "clip_text_model",
        dict(CLIP_TEXT, projection_dim=8, num_hidden_layers=3),
        dict(
            heads=("none",),
            model_class="CLIPTextModelWithProjection",
            end_token_id=3,
            pad_token_id=1,
        ),
    ),
}
