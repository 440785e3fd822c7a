"""RWKV-4: time-mix / channel-mix recurrence with five per-layer states.

transformers' RWKV takes ``state=`` rather than a cache, so the harness re-runs
the whole sequence on the PyTorch side at every step; the ONNX graph decodes
through its states. ``rescale_every=1`` makes the eval-mode halving of the
residual stream bite in a 3-layer model. ``attention_hidden_size`` stays at
``hidden_size``: transformers sizes every state by ``hidden_size`` and fails otherwise.
"""

RWKV = dict(
    context_length=64,
    num_hidden_layers=3,
    layer_norm_epsilon=1e-5,
)

CASES = {
    "rwkv": ("rwkv", dict(RWKV, rescale_every=1)),
    "rwkv-tied-norescale": ("rwkv", dict(RWKV, rescale_every=0, tie_word_embeddings=True)),
}
