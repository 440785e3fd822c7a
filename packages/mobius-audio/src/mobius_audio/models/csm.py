"""CSM (Sesame's conversational speech model): a Llama backbone, a Llama depth decoder, Mimi.

The backbone reads one row per position: a text token (``embed_text_tokens``) or an
audio frame, the sum of one embedding per codebook (codebook ``c``'s code ``k`` reads
row ``c * vocab + k`` of ``backbone_model.embed_tokens.embed_audio_tokens``), and
predicts codebook 0 of the next frame (``lm_head``). The depth decoder then writes
codebooks 1..K-1 of that frame: position 0 is the backbone's last hidden state,
position ``p >= 1`` the embedding of codebook ``p - 1``'s code (rows offset as the
backbone's, ``depth_decoder.model.embed_tokens``), both through
``inputs_embeds_projector``; position ``p`` predicts codebook ``p`` with its own head
(``depth_decoder.codebooks_head.weight[p - 1]``, ``[hidden, vocab]``). Mimi
(``codec_model``, :mod:`mobius_audio.models.mimi`) decodes the frames to 24 kHz audio.

Both stacks are Llama decoders (pre-norm RMSNorm, rotary, grouped key/value heads, a
gated MLP) built from core's components. The module tree follows
``CsmForConditionalGeneration`` checkpoints (``sesame/csm-1b``, as transformers loads
it); graphs follow :mod:`mobius_audio.tasks_csm`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Attention,
    DecoderLayer,
    Embedding,
    GatedMLP,
    Linear,
    RMSNorm,
    attention_bias,
    make_rotary_embedding,
    module_scope,
    rotary_dim,
)
from mobius.config import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models._checks import checked_int
from mobius_audio.models.mimi import MimiConfig, MimiModel


def _count(value: Any, name: str, low: int = 1) -> int:
    return checked_int(value, f"csm {name}", low)


@dataclass
class CsmConfig:
    """The backbone's and depth decoder's Llama settings, the codebook layout and Mimi's."""

    model_type: str
    backbone: ArchitectureConfig  # vocab_size: codes per codebook (the special ids included)
    depth: ArchitectureConfig
    codec: MimiConfig
    text_vocab_size: int
    num_codebooks: int
    codebook_eos_token_id: int

    @property
    def vocab_size(self) -> int:
        return self.backbone.vocab_size

    @classmethod
    def from_hf(cls, hf: Any) -> CsmConfig:
        depth_hf = hf.depth_decoder_config
        books = _count(hf.num_codebooks, "num_codebooks", 2)
        vocab = _count(hf.vocab_size, "vocab_size", 2)
        if depth_hf.num_codebooks != books or depth_hf.vocab_size != vocab:
            raise ConfigError(
                "csm: the depth decoder's num_codebooks and vocab_size must be the backbone's "
                f"({books}, {vocab})"
            )
        if depth_hf.backbone_hidden_size != hf.hidden_size:
            raise ConfigError("csm: depth_decoder_config.backbone_hidden_size must be hidden_size")
        codec = MimiConfig.from_hf(hf.codec_config)
        if books > codec.n_codebooks:
            raise ConfigError(
                f"csm: {books} codebooks, but its Mimi codec has {codec.n_codebooks} quantizers"
            )
        eos = hf.codebook_eos_token_id
        if isinstance(eos, bool) or not isinstance(eos, int) or not 0 <= eos < vocab:
            raise ConfigError(f"csm codebook_eos_token_id {eos!r} is not a code below {vocab}")
        try:
            backbone = ArchitectureConfig.from_hf(hf)
            depth = ArchitectureConfig.from_hf(depth_hf)
        except ValueError as exc:  # heads not in groups of the key/value heads
            raise ConfigError(f"csm: {exc}") from None
        return cls(
            model_type="csm",
            backbone=backbone,
            depth=depth,
            codec=codec,
            text_vocab_size=_count(hf.text_vocab_size, "text_vocab_size"),
            num_codebooks=books,
            codebook_eos_token_id=eos,
        )


class CsmStack(nn.Module):
    """Llama decoder layers, the final norm and the rotary table over given embeddings."""

    def __init__(self, config: ArchitectureConfig) -> None:
        super().__init__()
        c = config
        self.layers = nn.ModuleList(
            DecoderLayer(
                self_attn=Attention(
                    c.hidden_size,
                    c.num_attention_heads,
                    c.num_key_value_heads,
                    c.head_dim,
                    bias=c.attention_bias,
                    out_bias=c.attention_bias,
                    rotary_dim=rotary_dim(c.rope, c.head_dim),
                ),
                mlp=GatedMLP(c.hidden_size, c.intermediate_size, c.hidden_act, c.mlp_bias),
                input_layernorm=RMSNorm(c.hidden_size, c.rms_norm_eps),
                post_attention_layernorm=RMSNorm(c.hidden_size, c.rms_norm_eps),
            )  # fmt: skip
            for _ in range(c.num_hidden_layers)
        )
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary_emb = make_rotary_embedding(c.rope, c.head_dim, c.max_position_embeddings)

    def run_layers(self, op, x, attention_mask, position_ids, past):
        """``x [batch, seq, hidden]`` through the layers (causal over ``attention_mask``) and the norm."""
        cos_sin = self.rotary_emb(op, position_ids)
        seq_len = op.Squeeze(op.Shape(x, start=1, end=2), [0])
        bias = attention_bias(op, attention_mask, seq_len, x.dtype)
        presents = []
        for layer, (key, value) in zip(self.layers, past, strict=True):
            x, present = layer(op, x, cos_sin, bias, key, value)
            presents.append(present)
        return self.norm(op, x), presents


def _present(op, ids, like):
    """``ids >= 0`` as a mask of ``like``'s float type: -1 marks an absent token."""
    return op.Cast(op.GreaterOrEqual(ids, op.Constant(value_int=0)), to=like.dtype)


class CsmAudioEmbeddings(nn.Module):
    """``embed_audio_tokens``: a frame's codes ``[..., K]`` to the sum of their rows; -1 adds nothing."""

    def __init__(self, config: CsmConfig) -> None:
        super().__init__()
        self.embed_audio_tokens = Embedding(
            config.num_codebooks * config.vocab_size, config.backbone.hidden_size
        )
        self.offsets = np.arange(config.num_codebooks, dtype=np.int64) * config.vocab_size

    def forward(self, op, codes):
        rows = op.Add(
            op.Max(codes, op.Constant(value_int=0)), op.Constant(value=ir.tensor(self.offsets))
        )
        embeds = self.embed_audio_tokens(op, rows)
        embeds = op.Mul(embeds, op.Unsqueeze(_present(op, codes, embeds), [-1]))
        return op.ReduceSum(embeds, [-2], keepdims=0)


class CsmBackboneModel(CsmStack):
    def __init__(self, config: CsmConfig) -> None:
        super().__init__(config.backbone)
        self.embed_tokens = CsmAudioEmbeddings(config)


class CsmDepthDecoderModel(CsmStack):
    """The depth stack: ``embed_tokens`` in the backbone's width, projected to its own."""

    def __init__(self, config: CsmConfig) -> None:
        super().__init__(config.depth)
        self.embed_tokens = Embedding(
            config.num_codebooks * config.vocab_size, config.backbone.hidden_size
        )
        self.inputs_embeds_projector = Linear(config.backbone.hidden_size, config.depth.hidden_size)


class CsmCodebooksHead(nn.Module):
    """``weight [K - 1, hidden, vocab]``: position ``p`` (codebook ``p``) uses ``weight[p - 1]``."""

    def __init__(self, config: CsmConfig) -> None:
        super().__init__()
        depth = config.depth
        self.weight = nn.Parameter([config.num_codebooks - 1, depth.hidden_size, config.vocab_size])

    def forward(self, op, hidden, head_index):
        weights = op.Gather(self.weight, head_index, axis=0)  # [seq, hidden, vocab]
        per_position = op.MatMul(
            op.Transpose(hidden, perm=[1, 0, 2]), weights
        )  # [seq, batch, vocab]
        return op.Transpose(per_position, perm=[1, 0, 2])


class CsmDepthDecoderForCausalLM(nn.Module):
    def __init__(self, config: CsmConfig) -> None:
        super().__init__()
        self.model = CsmDepthDecoderModel(config)
        self.codebooks_head = CsmCodebooksHead(config)


class CsmForConditionalGeneration(Model):
    """Hooks of :mod:`mobius_audio.tasks_csm`: ``backbone``, ``depth_step``, ``encode_audio``, ``decode_audio``."""

    config_class = CsmConfig
    task = "conversational-speech"
    #: What Mimi's checkpoints hold and its graphs do not read, under ``codec_model``.
    ignored = tuple(f"codec_model.{pattern}" for pattern in MimiModel.ignored)

    def __init__(self, config: CsmConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_text_tokens = Embedding(config.text_vocab_size, config.backbone.hidden_size)
        self.backbone_model = CsmBackboneModel(config)
        self.lm_head = Linear(config.backbone.hidden_size, config.vocab_size)
        self.depth_decoder = CsmDepthDecoderForCausalLM(config)
        self.codec_model = MimiModel(config.codec)

    def backbone(self, op, frames, attention_mask, position_ids, past):
        """``frames [batch, seq, K + 1]`` (K codes, then a text token; -1 absent) to
        ``(logits, last_hidden_state, presents)``."""
        books = self.config.num_codebooks
        codes = op.Slice(frames, [0], [books], [2])
        text = op.Squeeze(op.Slice(frames, [books], [books + 1], [2]), [2])
        with module_scope(op, self):
            text_embeds = self.embed_text_tokens(op, op.Max(text, op.Constant(value_int=0)))
            text_embeds = op.Mul(text_embeds, op.Unsqueeze(_present(op, text, text_embeds), [-1]))
            with module_scope(op, self.backbone_model):
                audio_embeds = self.backbone_model.embed_tokens(op, codes)
                hidden, presents = self.backbone_model.run_layers(
                    op, op.Add(text_embeds, audio_embeds), attention_mask, position_ids, past
                )
            logits = self.lm_head(op, hidden)
        return logits, hidden, presents

    def depth_step(self, op, codes, backbone_last_hidden_state, past):
        """Codes ``[batch, seq]`` at depth positions ``past ..`` (position 0 reads
        ``backbone_last_hidden_state``) to ``(logits [batch, seq, vocab], presents)``."""
        depth = self.depth_decoder.model
        past_length = op.Shape(past[0][0], start=2, end=3)
        seq_length = op.Shape(codes, start=1, end=2)
        total = op.Add(past_length, seq_length)
        positions = op.Range(
            op.Squeeze(past_length, [0]), op.Squeeze(total, [0]), op.Constant(value_int=1)
        )
        zero = op.Constant(value_int=0)
        books = op.Max(op.Sub(positions, op.Constant(value_int=1)), zero)  # codebook of each input
        batch = op.Shape(codes, start=0, end=1)
        position_ids = op.Expand(op.Unsqueeze(positions, [0]), op.Concat(batch, seq_length, axis=0))
        mask = op.ConstantOfShape(
            op.Concat(batch, total, axis=0), value=ir.tensor(np.array([1], np.int64))
        )
        with module_scope(op, self, self.depth_decoder):
            with module_scope(op, depth):
                rows = op.Add(codes, op.Mul(books, op.Constant(value_int=self.config.vocab_size)))
                embeds = depth.embed_tokens(op, rows)
                first = op.Unsqueeze(op.Equal(positions, zero), [0, 2])  # [1, seq, 1]
                state = op.Unsqueeze(backbone_last_hidden_state, [1])
                embeds = op.Where(first, op.CastLike(state, embeds), embeds)
                x = depth.inputs_embeds_projector(op, embeds)
                hidden, presents = depth.run_layers(op, x, mask, position_ids, past)
            limit = op.Constant(value_int=self.config.num_codebooks - 2)
            logits = self.depth_decoder.codebooks_head(op, hidden, op.Min(books, limit))
        return logits, presents

    def encode_audio(self, op, input_values):
        """Mimi's encode: ``[batch, 1, samples]`` -> int64 ``[batch, num_quantizers, frames]``."""
        with module_scope(op, self, self.codec_model):
            return self.codec_model.encode(op, input_values)

    def decode_audio(self, op, audio_codes):
        """Mimi's decode: ``[batch, K, frames]`` -> ``[batch, 1, samples]``."""
        with module_scope(op, self, self.codec_model):
            return self.codec_model.decode(op, audio_codes)

    def sanitize(self, weights: dict) -> dict:
        """Tied codebook embeddings may be stored once; a weight-normalised codec is folded."""
        backbone = "backbone_model.embed_tokens.embed_audio_tokens.weight"
        depth = "depth_decoder.model.embed_tokens.weight"
        if backbone in weights and depth not in weights:
            weights[depth] = weights[backbone]
        elif depth in weights and backbone not in weights:
            weights[backbone] = weights[depth]
        codec = {
            k[len("codec_model.") :]: v for k, v in weights.items() if k.startswith("codec_model.")
        }
        others = {k: v for k, v in weights.items() if not k.startswith("codec_model.")}
        folded = self.codec_model.sanitize(codec)
        return {**others, **{f"codec_model.{k}": v for k, v in folded.items()}}


MODEL_TYPES = {"csm": CsmForConditionalGeneration}
