"""SigLIP's text tower (and SigLIP 2's): bidirectional layers, the last token pooled through ``head``.

No auto class maps these configs to a model: the kit is told the class.
"""

HEADS = ("none", "sentence-embedding")

CASES = {
    "siglip_text_model": (
        "siglip_text_model",
        dict(bos_token_id=1, eos_token_id=2, projection_size=24),
        dict(heads=HEADS, model_class="SiglipTextModel", pad_token_id=1),
    ),
    # projection_size unset: the head keeps hidden_size; random ids at the padded positions.
    "siglip_text_model-relu-eps": (
        "siglip_text_model",
        dict(bos_token_id=1, eos_token_id=2, hidden_act="relu", layer_norm_eps=1e-5),
        dict(heads=("none",), model_class="SiglipTextModel"),
    ),
    "siglip2_text_model": (
        "siglip2_text_model",
        dict(bos_token_id=1, eos_token_id=2, projection_size=24, num_hidden_layers=3),
        dict(heads=("none",), model_class="Siglip2TextModel", pad_token_id=1),
    ),
}
