"""xLSTM: mLSTM blocks with matrix-memory states.

transformers' xLSTM takes ``cache=`` but needs its own ``xLSTMCache`` (it reads
``cache.rnn_state``): the cases hand the harness a ``torch_cache`` factory.

``hidden_size * qk_dim_factor`` must be a multiple of 64: transformers' layer
truncates the q/k width while its cache rounds it up to 64. ``gate_soft_cap`` and
``output_logit_soft_cap`` are small so that both caps bite.
"""


def xlstm_cache(model, batch: int):
    """The PyTorch-side cache transformers' xLSTM expects."""
    import torch
    from transformers.models.xlstm.modeling_xlstm import xLSTMCache

    return xLSTMCache(model.config, batch, dtype=torch.float32)


OPTIONS = {"torch_cache": xlstm_cache}
XLSTM = dict(num_heads=4, gate_soft_cap=0.5, output_logit_soft_cap=1.0)

CASES = {
    # dqk 16 != dv 32
    "xlstm": ("xlstm", dict(XLSTM, hidden_size=128, qk_dim_factor=0.5), OPTIONS),
    # biases everywhere; tie_word_embeddings is ignored by transformers' xLSTM
    "xlstm-bias": (
        "xlstm",
        dict(XLSTM, qk_dim_factor=1.0, use_bias=True, tie_word_embeddings=True),
        OPTIONS,
    ),
}
