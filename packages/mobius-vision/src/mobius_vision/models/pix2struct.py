"""Pix2Struct: a T5-style encoder over variable-resolution patches, and a T5 decoder.

The processor cuts the image into at most ``max_patches`` patches at the aspect
ratio it has and pads the list: each row is ``(row index, column index,
patch values...)``. The encoder embeds the values (``patch_projection``) and adds a
learned row and a learned column embedding; its layers are T5's (RMS norms before
attention and MLP, unscaled scores, no biases, a gated MLP) with no relative
positions, masked by ``attention_mask``. The decoder is mobius-text's T5 decoder
stack (relative position bias in block 0, cross-attention, gated MLP) with its own
``embed_tokens`` and an untied ``lm_head``; checkpoint names (``layer.{i}.
self_attention.attention.query``...) are mapped to T5's (``block.{i}.layer.0.
SelfAttention.q``...) in :meth:`Pix2StructForConditionalGeneration.sanitize`.
Graphs follow :mod:`mobius_vision.tasks.image_to_text` (its patch variant).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    Linear,
    RMSNorm,
    Seq2SeqAttention,
    causal_bias,
    get_activation,
    module_scope,
    padding_bias,
)
from mobius.model import Model
from mobius_text.models.t5 import T5Config, T5Stack, _length, _positions

INT64 = ir.DataType.INT64


@dataclass
class Pix2StructVisionConfig:
    hidden_size: int
    patch_embed_hidden_size: int
    intermediate_size: int
    head_dim: int
    num_layers: int
    num_heads: int
    act: str
    eps: float
    seq_len: int

    @classmethod
    def from_hf(cls, hf: Any) -> Pix2StructVisionConfig:
        return cls(
            hidden_size=hf.hidden_size,
            patch_embed_hidden_size=hf.patch_embed_hidden_size,
            intermediate_size=hf.d_ff,
            head_dim=hf.d_kv,
            num_layers=hf.num_hidden_layers,
            num_heads=hf.num_attention_heads,
            act=hf.dense_act_fn,
            eps=hf.layer_norm_eps,
            seq_len=hf.seq_len,
        )


def text_config(hf: Any) -> T5Config:
    """Pix2Struct's text config as mobius-text's T5 decoder reads it (gated, unscaled head)."""
    return T5Config(
        model_type="t5",
        vocab_size=hf.vocab_size,
        hidden_size=hf.hidden_size,
        head_dim=hf.d_kv,
        intermediate_size=hf.d_ff,
        num_layers=hf.num_layers,
        num_decoder_layers=hf.num_layers,
        num_heads=hf.num_heads,
        num_buckets=hf.relative_attention_num_buckets,
        max_distance=hf.relative_attention_max_distance,
        eps=hf.layer_norm_epsilon,
        act=hf.dense_act_fn,
        gated=True,
        scale_decoder_outputs=False,
        decoder_start_token_id=hf.decoder_start_token_id,
        eos_token_id=hf.eos_token_id,
        pad_token_id=hf.pad_token_id,
    )


@dataclass
class Pix2StructConfig:
    model_type: str
    vision: Pix2StructVisionConfig
    text: T5Config
    decoder_start_token_id: int

    @classmethod
    def from_hf(cls, hf_config: Any) -> Pix2StructConfig:
        return cls(
            model_type=hf_config.model_type,
            vision=Pix2StructVisionConfig.from_hf(hf_config.vision_config),
            text=text_config(hf_config.text_config),
            decoder_start_token_id=int(hf_config.text_config.decoder_start_token_id),
        )

    @property
    def hidden_size(self) -> int:
        return self.vision.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.text.vocab_size


class Pix2StructVisionEmbeddings(nn.Module):
    def __init__(self, config: Pix2StructVisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.patch_projection = Linear(config.patch_embed_hidden_size, d, bias=True)
        self.row_embedder = Embedding(config.seq_len, d)
        self.column_embedder = Embedding(config.seq_len, d)

    def forward(self, op, patches):
        """``patches [batch, n, 2 + values]`` → ``[batch, n, hidden]``."""
        rows = op.Cast(op.Gather(patches, op.Constant(value_int=0), axis=2), to=INT64)
        columns = op.Cast(op.Gather(patches, op.Constant(value_int=1), axis=2), to=INT64)
        values = op.Slice(patches, [2], [2**62], [2])
        x = self.patch_projection(op, values)
        return op.Add(op.Add(x, self.row_embedder(op, rows)), self.column_embedder(op, columns))


class Pix2StructVisionAttention(Seq2SeqAttention):
    """T5's: unscaled scores, no biases."""

    projection_names = ("query", "key", "value", "output")


class Pix2StructVisionMlp(nn.Module):
    def __init__(self, config: Pix2StructVisionConfig) -> None:
        super().__init__()
        d, ff = config.hidden_size, config.intermediate_size
        self.wi_0 = Linear(d, ff, bias=False)
        self.wi_1 = Linear(d, ff, bias=False)
        self.wo = Linear(ff, d, bias=False)
        self.act = get_activation(config.act)

    def forward(self, op, x):
        return self.wo(op, op.Mul(self.act(op, self.wi_0(op, x)), self.wi_1(op, x)))


class Pix2StructVisionLayer(nn.Module):
    def __init__(self, config: Pix2StructVisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.attention = Pix2StructVisionAttention(
            d, config.num_heads, config.head_dim, bias=False, scale=1.0
        )
        self.mlp = Pix2StructVisionMlp(config)
        self.pre_attention_layer_norm = RMSNorm(d, config.eps)
        self.pre_mlp_layer_norm = RMSNorm(d, config.eps)

    def forward(self, op, x, bias):
        x = op.Add(x, self.attention(op, self.pre_attention_layer_norm(op, x), bias))
        return op.Add(x, self.mlp(op, self.pre_mlp_layer_norm(op, x)))


class Pix2StructVisionEncoder(nn.Module):
    def __init__(self, config: Pix2StructVisionConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(
            [Pix2StructVisionLayer(config) for _ in range(config.num_layers)]
        )

    def forward(self, op, x, bias):
        for layer in self.layer:
            x = layer(op, x, bias)
        return x


class Pix2StructVisionModel(nn.Module):
    def __init__(self, config: Pix2StructVisionConfig) -> None:
        super().__init__()
        self.embeddings = Pix2StructVisionEmbeddings(config)
        self.encoder = Pix2StructVisionEncoder(config)
        self.layernorm = RMSNorm(config.hidden_size, config.eps)

    def forward(self, op, patches, attention_mask):
        x = self.embeddings(op, patches)
        bias = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, patches, patches]
        return self.layernorm(op, self.encoder(op, x, bias))


class Pix2StructTextModel(T5Stack):
    """T5's decoder stack with its own ``embed_tokens`` and ``lm_head``."""

    def __init__(self, config: T5Config) -> None:
        super().__init__(config, is_decoder=True)
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)


#: A text block's parts as the checkpoint names them → as T5 does (under ``block.{i}.``).
_TEXT_PARTS = {
    "self_attention.attention.": "layer.0.SelfAttention.",
    "self_attention.layer_norm.": "layer.0.layer_norm.",
    "encoder_decoder_attention.attention.": "layer.1.EncDecAttention.",
    "encoder_decoder_attention.layer_norm.": "layer.1.layer_norm.",
    "mlp.": "layer.2.",
}
_PROJECTIONS = {"query": "q", "key": "k", "value": "v", "output": "o"}
_TEXT_BLOCK = re.compile(r"decoder\.layer\.(\d+)\.(.*)")


def t5_name(name: str) -> str:
    """A Pix2Struct text-block checkpoint name as T5's module tree names it."""
    match = _TEXT_BLOCK.fullmatch(name)
    if match is None:
        return name
    index, rest = match.groups()
    for part, t5_part in _TEXT_PARTS.items():
        if rest.startswith(part):
            rest = t5_part + rest[len(part) :]
            head, _, leaf = rest.rpartition(".")
            stem, _, projection = head.rpartition(".")
            if projection in _PROJECTIONS:
                rest = f"{stem}.{_PROJECTIONS[projection]}.{leaf}"
            break
    return f"decoder.block.{index}.{rest}"


class Pix2StructForConditionalGeneration(Model):
    """``encoder`` (over patches) and ``decoder`` (T5's, with ``embed_tokens`` and ``lm_head``)."""

    config_class = Pix2StructConfig
    task = "image-to-text"
    #: Only block 0's self-attention has a relative table; transformers makes none elsewhere.
    ignored = ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",)

    def __init__(self, config: Pix2StructConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Pix2StructVisionModel(config.vision)
        self.decoder = Pix2StructTextModel(config.text)

    def patch_input(self) -> tuple[str, list]:
        """The encoder's patch input: ``flattened_patches`` [batch, patches, 2 + values]."""
        width = 2 + self.config.vision.patch_embed_hidden_size
        return "flattened_patches", ["batch", "patches", width]

    def cache_shapes(self) -> tuple[int, int, int]:
        text = self.config.text
        return text.num_decoder_layers, text.num_heads, text.head_dim

    def encode(self, op, patches, attention_mask):
        hidden = self.encoder(op, patches, attention_mask)
        cross = []
        for block in self.decoder.block:  # computed once here, read at every decoder step
            layer = block.layer[1]
            with module_scope(op, self.decoder, block, layer, layer.EncDecAttention):
                cross.append(layer.EncDecAttention.project_kv(op, hidden))
        return hidden, cross

    def decode(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        decoder = self.decoder
        with module_scope(op, decoder):
            x = decoder.embed_tokens(op, input_ids)  # [batch, target, hidden]
        past = _length(op, self_cache[0][0], 2)
        total = op.Add(past, _length(op, input_ids, 1))
        query_pos = op.Range(past, total, op.Constant(value_int=1))
        causal = causal_bias(op, input_ids, self_cache[0][0], x.dtype)  # [batch, 1, target, total]
        cross_bias = padding_bias(op, encoder_mask, x.dtype, queries=input_ids)
        hidden, presents = decoder(
            op, x, causal, query_pos, _positions(op, total), (cross_bias, cross_cache), self_cache
        )
        with module_scope(op, decoder):
            return decoder.lm_head(op, hidden), presents

    def sanitize(self, weights: dict) -> dict:
        """Text-block names to T5's (module docstring)."""
        return {t5_name(name): value for name, value in weights.items()}


MODEL_TYPES = {"pix2struct": Pix2StructForConditionalGeneration}
