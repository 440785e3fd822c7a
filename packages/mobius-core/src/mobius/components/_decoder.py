"""The pre-norm transformer decoder layer."""

from __future__ import annotations

from onnxscript import nn


class DecoderLayer(nn.Module):
    """``x + attn(norm(x))`` then ``x + mlp(norm(x))``, with submodules given by the caller."""

    def __init__(self, self_attn, mlp, input_layernorm, post_attention_layernorm) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.input_layernorm = input_layernorm
        self.post_attention_layernorm = post_attention_layernorm

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, h)
        x = op.Add(x, self.mlp(op, self.post_attention_layernorm(op, x)))
        return x, present
