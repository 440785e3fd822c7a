"""MVP: BART's architecture with optional lightweight prompts (``use_prompt``).

With prompts, the decoder owns two :class:`MvpPrompt` (``self_attn_prompt``,
``cross_attn_prompt``): an embedding of ``prompt_length`` rows through a two-layer GELU
MLP gives every layer a key and a value ``[heads, prompt_length, head_dim]``, prepended
to the keys and values of its self- or cross-attention and never masked. The prompts
depend on the weights alone; the caches hold the tokens' keys and values only, as
transformers' do. The encoder is BART's with or without prompts: transformers (5.24)
hands ``use_prompt`` to ``MvpEncoder``'s ``embed_tokens`` argument, so its encoder has
none, and a checkpoint's ``model.encoder.self_attn_prompt.*`` goes unread there as here.
The decoder alone (``MvpForCausalLM``) has no prompts whatever the config says
(transformers builds it without them): it is BART's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    CrossAttention,
    Embedding,
    Linear,
    Seq2SeqAttention,
    causal_bias,
    get_activation,
    merge_heads,
    padding_bias,
)
from mobius_text.models.bart import (
    BartConfig,
    BartDecoder,
    BartDecoderLayer,
    BartForCausalLM,
    BartForConditionalGeneration,
    BartModel,
    _length,
)


@dataclass
class MvpConfig(BartConfig):
    use_prompt: bool = False
    prompt_length: int = 100
    prompt_mid_dim: int = 800

    @classmethod
    def from_hf(cls, hf: Any) -> MvpConfig:
        return cls(
            **vars(BartConfig.from_hf(hf)),
            use_prompt=bool(hf.use_prompt),
            prompt_length=hf.prompt_length,
            prompt_mid_dim=hf.prompt_mid_dim,
        )


class Prompted(NamedTuple):
    """An attention's additive mask with its layer's prompt ``key``/``value`` ``[heads, prompt, head_dim]``."""

    bias: ir.Value
    key: ir.Value
    value: ir.Value


class _Gelu(nn.Module):
    def forward(self, op, x):
        return get_activation("gelu")(op, x)


class MvpPrompt(nn.Module):
    """Per-layer prompt keys and values of one attention kind, from the weights alone."""

    def __init__(self, config: MvpConfig, num_layers: int, num_heads: int) -> None:
        super().__init__()
        d, mid = config.hidden_size, config.prompt_mid_dim
        self.prompt_embedding = Embedding(config.prompt_length, d)
        self.prompt_trans = nn.Sequential(
            Linear(d, mid, bias=True), _Gelu(), Linear(mid, num_layers * 2 * d, bias=True)
        )
        self.num_layers, self.num_heads = num_layers, num_heads
        self.prompt_length = config.prompt_length

    def forward(self, op) -> list[tuple[ir.Value, ir.Value]]:
        """Per layer ``(key, value)``, each ``[heads, prompt_length, head_dim]``."""
        ids = op.Constant(value_ints=list(range(self.prompt_length)))
        rows = self.prompt_trans(op, self.prompt_embedding(op, ids))  # [prompt, layers*2*hidden]
        shape = op.Constant(value_ints=[0, 2 * self.num_layers, self.num_heads, -1])
        kv = op.Transpose(op.Reshape(rows, shape), perm=[1, 2, 0, 3])  # [layers*2, h, prompt, dim]
        index = [op.Constant(value_int=i) for i in range(2 * self.num_layers)]
        return [
            (op.Gather(kv, index[2 * i], axis=0), op.Gather(kv, index[2 * i + 1], axis=0))
            for i in range(self.num_layers)
        ]


def prompted_attention(op, q, key, value, prompted: Prompted, scale: float):
    """``q [batch, heads, queries, dim]`` over the prompt then ``key``/``value`` ``[batch, heads, keys, dim]``.

    The prompt's columns of the mask are zero: every query sees every prompt row.
    Returns ``[batch, queries, heads*dim]``.
    """
    batch = op.Concat(op.Shape(q, start=0, end=1), op.Constant(value_ints=[1, 1, 1]), axis=0)
    key = op.Concat(op.Expand(op.Unsqueeze(prompted.key, [0]), batch), key, axis=2)
    value = op.Concat(op.Expand(op.Unsqueeze(prompted.value, [0]), batch), value, axis=2)
    prompt = op.Shape(prompted.key, start=1, end=2)
    zero = op.Constant(value_ints=[0, 0, 0])
    bias = op.Pad(prompted.bias, op.Concat(zero, prompt, zero, op.Constant(value_ints=[0]), axis=0))
    return merge_heads(op, op.Attention(q, key, value, bias, scale=scale))


class MvpSelfAttention(Seq2SeqAttention):
    """Self-attention whose ``bias`` may be :class:`Prompted` (the keys and values it prepends)."""

    def forward(self, op, x, bias, past_key, past_value):
        if not isinstance(bias, Prompted):
            return super().forward(op, x, bias, past_key, past_value)
        q_proj, _, _, out_proj = self.projections()
        q, (key, value) = self.split_heads(op, q_proj(op, x)), self.project_kv(op, x)
        # the cache holds the tokens' keys and values, never the prompt's
        key, value = op.Concat(past_key, key, axis=2), op.Concat(past_value, value, axis=2)
        y = out_proj(op, prompted_attention(op, q, key, value, bias, self.scale))
        return y, (key, value)


class MvpCrossAttention(CrossAttention):
    def forward(self, op, x, bias, key, value):
        if not isinstance(bias, Prompted):
            return super().forward(op, x, bias, key, value)
        q_proj, _, _, out_proj = self.projections()
        q = self.split_heads(op, q_proj(op, x))
        return out_proj(op, prompted_attention(op, q, key, value, bias, self.scale))


class MvpDecoderLayer(BartDecoderLayer):
    def __init__(self, config: MvpConfig) -> None:
        super().__init__(config)
        self.self_attn = MvpSelfAttention(config.hidden_size, config.decoder_heads)
        self.encoder_attn = MvpCrossAttention(config.hidden_size, config.decoder_heads)


class MvpDecoder(BartDecoder):
    """BART's decoder; with ``use_prompt``, ``self_attn_prompt`` and ``cross_attn_prompt``."""

    layer_class = MvpDecoderLayer

    def __init__(self, config: MvpConfig) -> None:
        super().__init__(config)
        self.self_attn_prompt = self.cross_attn_prompt = None
        if config.use_prompt:
            layers, heads = config.decoder_layers, config.decoder_heads
            self.self_attn_prompt = MvpPrompt(config, layers, heads)
            self.cross_attn_prompt = MvpPrompt(config, layers, heads)

    def forward(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        if self.self_attn_prompt is None:
            return super().forward(op, input_ids, encoder_mask, self_cache, cross_cache)
        x = self.embed(op, input_ids, _length(op, self_cache[0][0], 2))
        causal = causal_bias(op, input_ids, self_cache[0][0], x.dtype)  # [batch, 1, target, total]
        cross_bias = padding_bias(op, encoder_mask, x.dtype, queries=input_ids)
        prompts = zip(self.self_attn_prompt(op), self.cross_attn_prompt(op), strict=True)
        presents = []
        for layer, past, (key, value), (own, cross) in zip(
            self.layers, self_cache, cross_cache, prompts, strict=True
        ):
            cross_args = (Prompted(cross_bias, *cross), key, value)
            x, present = layer(op, x, Prompted(causal, *own), cross_args, past)
            presents.append(present)
        return self.finish(op, x), presents


class MvpModel(BartModel):
    decoder_class = MvpDecoder


class MvpForConditionalGeneration(BartForConditionalGeneration):
    config_class = MvpConfig
    model_class = MvpModel
    # transformers' encoder has no prompts (see the module docstring): older checkpoints' are unread
    ignored = ("model.encoder.self_attn_prompt.*",)


# The decoder alone never has prompts (transformers' MvpForCausalLM): BART's.
MODEL_TYPES = {"mvp": MvpForConditionalGeneration, "MvpForCausalLM": BartForCausalLM}
