"""The pre-norm transformer decoder layer."""

from __future__ import annotations

from onnxscript import nn


class DecoderLayer(nn.Module):
    """``x + attn(norm(x))`` then ``x + mlp(norm(x))``, with submodules given by the caller.

    The attention and the feed-forward block take the attribute names
    :attr:`attention_name` and :attr:`mlp_name`: a family whose checkpoints name
    them otherwise (``block_sparse_moe``, ``self_attention``...) subclasses and sets them.
    """

    attention_name = "self_attn"
    mlp_name = "mlp"

    def __init__(self, self_attn, mlp, input_layernorm, post_attention_layernorm) -> None:
        super().__init__()
        setattr(self, self.attention_name, self_attn)
        setattr(self, self.mlp_name, mlp)
        self.input_layernorm = input_layernorm
        self.post_attention_layernorm = post_attention_layernorm

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        attention, mlp = getattr(self, self.attention_name), getattr(self, self.mlp_name)
        h, present = attention(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, h)
        x = op.Add(x, mlp(op, self.post_attention_layernorm(op, x)))
        return x, present
