"""Bark: three GPT stages (semantic, coarse acoustics, fine acoustics) and EnCodec's decoder.

The module tree follows ``BarkModel`` checkpoints (``semantic.layers.0.attn.att_proj``,
``coarse_acoustics.lm_head``, ``fine_acoustics.input_embeds_layers.3``,
``codec_model.decoder.layers.0.conv``...):

- ``semantic`` and ``coarse_acoustics`` are GPT-2-like causal LMs (pre-LN blocks, a
  fused query/key/value projection, exact GELU, learned positions, an untied head;
  ``bias`` drops the linear and LayerNorm biases). The semantic stage's prompt adds a
  second embedding row at each position (the semantic history, summed onto the text
  tokens), so its graph takes ``history_ids`` beside the causal-LM inputs.
- ``fine_acoustics`` is the same block without the causal mask (LayerNorms always with
  bias), over the sum of the embeddings of codebooks ``0..codebook_idx``, with one head
  per predicted codebook (tied to the next codebook's embedding when
  ``tie_word_embeddings``, as transformers ties them).
- ``codec_model`` is the 24 kHz EnCodec (:mod:`mobius_audio.models.encodec`): only its
  quantizer and decoder are built; its encoder is not used by Bark.

The graphs and their names: :mod:`mobius_audio.tasks_bark`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    attention_bias,
    get_activation,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models._checks import checked_int
from mobius_audio.models._codec import fold_weight_norm
from mobius_audio.models.encodec import (
    EncodecConfig,
    EncodecDecoder,
    EncodecResidualVectorQuantizer,
)


def _sub_config(hf_config: Any, name: str) -> Any:
    """A sub-model config of ``BarkConfig`` (an object, or a dict in a raw config)."""
    value = getattr(hf_config, name, None)
    if value is None:
        raise ConfigError(f"bark: config has no {name}")
    return value


def _get(sub: Any, name: str, default: Any = None) -> Any:
    return sub.get(name, default) if isinstance(sub, dict) else getattr(sub, name, default)


def _positive_int(sub: Any, stage: str, name: str, default: Any = None) -> int:
    return checked_int(_get(sub, name, default), f"bark {stage} {name}")


@dataclass
class BarkStageConfig:
    """One GPT stage: sizes, vocabularies, the positions it holds and whether it has biases."""

    hidden_size: int
    num_heads: int
    num_layers: int
    block_size: int
    input_vocab_size: int
    output_vocab_size: int
    bias: bool

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def from_hf(cls, sub: Any, stage: str) -> BarkStageConfig:
        hidden = _positive_int(sub, stage, "hidden_size")
        heads = _positive_int(sub, stage, "num_heads")
        if hidden % heads:
            raise ConfigError(
                f"bark {stage}: hidden_size {hidden} is not a multiple of {heads} heads"
            )
        return cls(
            hidden_size=hidden,
            num_heads=heads,
            num_layers=_positive_int(sub, stage, "num_layers"),
            block_size=_positive_int(sub, stage, "block_size"),
            input_vocab_size=_positive_int(sub, stage, "input_vocab_size"),
            output_vocab_size=_positive_int(sub, stage, "output_vocab_size"),
            bias=bool(_get(sub, "bias", True)),
        )


@dataclass
class BarkFineStageConfig(BarkStageConfig):
    n_codes_total: int = 8
    n_codes_given: int = 1
    tie_word_embeddings: bool = True

    @classmethod
    def from_hf(cls, sub: Any, stage: str = "fine_acoustics") -> BarkFineStageConfig:
        base = BarkStageConfig.from_hf(sub, stage)
        total = _positive_int(sub, stage, "n_codes_total", 8)
        given = _positive_int(sub, stage, "n_codes_given", 1)
        if given >= total:
            raise ConfigError(f"bark {stage}: n_codes_given {given} >= n_codes_total {total}")
        tied = bool(_get(sub, "tie_word_embeddings", True))
        if tied and base.input_vocab_size != base.output_vocab_size:
            raise ConfigError(
                f"bark {stage}: tied heads need input_vocab_size {base.input_vocab_size} == "
                f"output_vocab_size {base.output_vocab_size}"
            )
        return cls(**vars(base), n_codes_total=total, n_codes_given=given, tie_word_embeddings=tied)


@dataclass
class BarkConfig:
    """The three stages and the codec of a ``BarkModel`` checkpoint."""

    model_type: str
    semantic: BarkStageConfig
    coarse_acoustics: BarkStageConfig
    fine_acoustics: BarkFineStageConfig
    codec: EncodecConfig

    @classmethod
    def from_hf(cls, hf_config: Any) -> BarkConfig:
        codec_hf = _sub_config(hf_config, "codec_config")
        if isinstance(codec_hf, dict):
            from transformers import EncodecConfig as HFEncodecConfig

            codec_hf = HFEncodecConfig(**{k: v for k, v in codec_hf.items() if k != "model_type"})
        codec = EncodecConfig.from_hf(codec_hf)
        if codec.channels != 1:
            raise ConfigError(f"bark: the codec has {codec.channels} channels; Bark speaks mono")
        fine = BarkFineStageConfig.from_hf(_sub_config(hf_config, "fine_acoustics_config"))
        if fine.n_codes_total > codec.n_codebooks:
            raise ConfigError(
                f"bark: fine_acoustics predicts {fine.n_codes_total} codebooks but the codec "
                f"has {codec.n_codebooks}"
            )
        return cls(
            model_type="bark",
            semantic=BarkStageConfig.from_hf(_sub_config(hf_config, "semantic_config"), "semantic"),
            coarse_acoustics=BarkStageConfig.from_hf(
                _sub_config(hf_config, "coarse_acoustics_config"), "coarse_acoustics"
            ),
            fine_acoustics=fine,
            codec=codec,
        )


class BarkAttention(nn.Module):
    """``att_proj`` (query, key, value fused) and ``out_proj``; scores scaled by ``1/sqrt(head_dim)``."""

    def __init__(self, config: BarkStageConfig, bias: bool) -> None:
        super().__init__()
        self.att_proj = Linear(config.hidden_size, 3 * config.hidden_size, bias)
        self.out_proj = Linear(config.hidden_size, config.hidden_size, bias)
        self.num_heads, self.head_dim = config.num_heads, config.head_dim

    def forward(self, op, x, bias=None, past_key=None, past_value=None):
        """Causal with a cache (``bias``, ``past_*`` given): ``(y, (key, value))``; else
        attention over the whole sequence: ``(y, None)``."""
        q, k, v = op.Split(self.att_proj(op, x), num_outputs=3, axis=-1, _outputs=3)
        q, k, v = (split_heads(op, t, self.num_heads, self.head_dim) for t in (q, k, v))
        scale = 1.0 / math.sqrt(self.head_dim)
        if past_key is None:
            y, present = op.Attention(q, k, v, scale=scale), None
        else:
            y, key, value = scaled_dot_product_attention(
                op, q, k, v, bias, past_key, past_value,
                num_heads=self.num_heads, num_kv_heads=self.num_heads, head_dim=self.head_dim,
                scale=scale,
            )  # fmt: skip
            present = (key, value)
        return self.out_proj(op, merge_heads(op, y)), present


class BarkMLP(nn.Module):
    def __init__(self, config: BarkStageConfig, bias: bool) -> None:
        super().__init__()
        self.in_proj = Linear(config.hidden_size, 4 * config.hidden_size, bias)
        self.out_proj = Linear(4 * config.hidden_size, config.hidden_size, bias)
        self.gelu = get_activation("gelu")

    def forward(self, op, x):
        return self.out_proj(op, self.gelu(op, self.in_proj(op, x)))


class BarkBlock(nn.Module):
    """Pre-LN: ``x + attn(ln_1(x))``, then ``+ mlp(ln_2(.))``."""

    def __init__(self, config: BarkStageConfig, norm_bias: bool) -> None:
        super().__init__()
        self.layernorm_1 = LayerNorm(config.hidden_size, bias=norm_bias)
        self.layernorm_2 = LayerNorm(config.hidden_size, bias=norm_bias)
        self.attn = BarkAttention(config, config.bias)
        self.mlp = BarkMLP(config, config.bias)

    def forward(self, op, x, bias=None, past_key=None, past_value=None):
        y, present = self.attn(op, self.layernorm_1(op, x), bias, past_key, past_value)
        x = op.Add(x, y)
        return op.Add(x, self.mlp(op, self.layernorm_2(op, x))), present


class BarkCausalLM(nn.Module):
    """The semantic and coarse stages: the causal-LM hooks, ``history_ids`` optional."""

    def __init__(self, config: BarkStageConfig) -> None:
        super().__init__()
        self.config = config
        self.input_embeds_layer = Embedding(config.input_vocab_size, config.hidden_size)
        self.position_embeds_layer = Embedding(config.block_size, config.hidden_size)
        # Causal blocks follow the config's `bias` in their LayerNorms too.
        self.layers = nn.ModuleList(
            [BarkBlock(config, config.bias) for _ in range(config.num_layers)]
        )
        self.layernorm_final = LayerNorm(config.hidden_size, bias=config.bias)
        self.lm_head = Linear(config.hidden_size, config.output_vocab_size)

    def cache_layout(self) -> list[list[tuple[str, list]]]:
        shape = ["batch", self.config.num_heads, "past_sequence", self.config.head_dim]
        return [[("key", shape), ("value", shape)] for _ in range(self.config.num_layers)]

    def forward(self, op, input_ids, attention_mask, position_ids, past, history_ids=None):
        """``(logits, present)``. ``history_ids`` (same shape as ``input_ids``) adds its
        rows' embeddings where it is not negative: the semantic prompt's history."""
        x = self.input_embeds_layer(op, input_ids)
        if history_ids is not None:
            zero = op.Constant(value=ir.tensor(np.array(0, np.int64)))
            present_rows = op.GreaterOrEqual(history_ids, zero)
            rows = self.input_embeds_layer(op, op.Max(history_ids, zero))
            weight = op.Unsqueeze(op.CastLike(present_rows, rows), [-1])
            x = op.Add(x, op.Mul(rows, weight))
        x = op.Add(x, self.position_embeds_layer(op, position_ids))
        dtype = past[0][0].dtype if past else ir.DataType.FLOAT
        bias = attention_bias(op, attention_mask, op.Shape(input_ids, start=1, end=2), dtype)
        present = []
        for layer, (past_key, past_value) in zip(self.layers, past, strict=True):
            x, kv = layer(op, x, bias, past_key, past_value)
            present.append(kv)
        return self.lm_head(op, self.layernorm_final(op, x)), present


class _HeadWeight(nn.Module):
    """An untied fine head: ``weight [vocab, hidden]`` (called so it joins the graph by its path)."""

    def __init__(self, hidden: int, vocab: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([vocab, hidden])

    def forward(self, op):
        return self.weight


class BarkFineModel(nn.Module):
    """The non-causal fine stage: ``(input_ids [batch, seq, n_codes_total], codebook_idx)`` ->
    ``logits [batch, seq, output_vocab]`` of codebook ``codebook_idx``."""

    def __init__(self, config: BarkFineStageConfig) -> None:
        super().__init__()
        self.config = config
        self.input_embeds_layers = nn.ModuleList(
            [
                Embedding(config.input_vocab_size, config.hidden_size)
                for _ in range(config.n_codes_total)
            ]
        )
        self.position_embeds_layer = Embedding(config.block_size, config.hidden_size)
        self.layers = nn.ModuleList([BarkBlock(config, True) for _ in range(config.num_layers)])
        self.layernorm_final = LayerNorm(config.hidden_size)
        heads = config.n_codes_total - config.n_codes_given
        self.lm_heads = (
            None
            if config.tie_word_embeddings
            else nn.ModuleList(
                [_HeadWeight(config.hidden_size, config.output_vocab_size) for _ in range(heads)]
            )
        )

    def forward(self, op, input_ids, codebook_idx):
        n = self.config.n_codes_total
        embeds = []
        for i, table in enumerate(self.input_embeds_layers):
            ids = op.Gather(input_ids, op.Constant(value=ir.tensor(np.array(i, np.int64))), axis=2)
            embeds.append(op.Unsqueeze(table(op, ids), [0]))
        stacked = op.Concat(*embeds, axis=0)  # [codebooks, batch, seq, hidden]
        # Sum the embeddings of codebooks 0..codebook_idx, as transformers does.
        kept = op.LessOrEqual(
            op.Constant(value=ir.tensor(np.arange(n, dtype=np.int64))), codebook_idx
        )
        kept = op.Reshape(op.CastLike(kept, stacked), op.Constant(value_ints=[n, 1, 1, 1]))
        x = op.ReduceSum(op.Mul(stacked, kept), op.Constant(value_ints=[0]), keepdims=0)
        sequence = op.Shape(input_ids, start=1, end=2)
        positions = op.Range(
            op.Constant(value_int=0), op.Squeeze(sequence, [0]), op.Constant(value_int=1)
        )
        x = op.Add(x, self.position_embeds_layer(op, positions))
        for layer in self.layers:
            x, _ = layer(op, x)
        x = self.layernorm_final(op, x)
        if self.lm_heads is None:  # head i is codebook i + 1's embedding (transformers' tying)
            heads = n - self.config.n_codes_given
            tables = [self.input_embeds_layers[i + 1].weight for i in range(heads)]
        else:
            tables = [head(op) for head in self.lm_heads]
        heads = op.Concat(*[op.Unsqueeze(t, [0]) for t in tables], axis=0)
        given = op.Constant(value=ir.tensor(np.array(self.config.n_codes_given, np.int64)))
        head = op.Gather(heads, op.Sub(codebook_idx, given), axis=0)  # [vocab, hidden]
        return op.MatMul(x, op.Transpose(head, perm=[1, 0]))


class BarkCodec(nn.Module):
    """EnCodec's quantizer and decoder: ``audio_codes [batch, K, frames]`` -> ``[batch, samples]``."""

    def __init__(self, config: EncodecConfig) -> None:
        super().__init__()
        self.quantizer = EncodecResidualVectorQuantizer(config)
        self.decoder = EncodecDecoder(config)

    def forward(self, op, audio_codes):
        audio = self.decoder(op, self.quantizer(op, audio_codes=audio_codes))
        return op.Squeeze(audio, op.Constant(value_ints=[1]))


class BarkModel(Model):
    """The hooks of :class:`mobius_audio.tasks_bark.BarkTask`: four submodules, one per graph."""

    config_class = BarkConfig
    task = "bark-text-to-audio"
    ignored = (
        "semantic.layers.*.attn.bias",  # the causal masks (boolean buffers)
        "coarse_acoustics.layers.*.attn.bias",
        "codec_model.encoder.*",  # Bark only decodes
        "codec_model.quantizer.layers.*.codebook.inited",
        "codec_model.quantizer.layers.*.codebook.cluster_size",
        "codec_model.quantizer.layers.*.codebook.embed_avg",
    )

    def __init__(self, config: BarkConfig) -> None:
        super().__init__()
        self.config = config
        self.semantic = BarkCausalLM(config.semantic)
        self.coarse_acoustics = BarkCausalLM(config.coarse_acoustics)
        self.fine_acoustics = BarkFineModel(config.fine_acoustics)
        self.codec_model = BarkCodec(config.codec)

    def sanitize(self, weights: dict) -> dict:
        """The codec's weight norms folded; a tied fine stage's head copies dropped (its
        graph reads the embeddings they copy)."""
        weights = fold_weight_norm(weights)
        if self.config.fine_acoustics.tie_word_embeddings:
            weights = {
                name: tensor
                for name, tensor in weights.items()
                if not name.startswith("fine_acoustics.lm_heads.")
            }
        return weights


MODEL_TYPES = {"bark": BarkModel}
