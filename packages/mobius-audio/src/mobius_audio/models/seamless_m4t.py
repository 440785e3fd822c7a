"""SeamlessM4T (v1) speech-to-text: a w2v-BERT conformer over stacked fbank frames, an adapter, an NLLB decoder.

The speech encoder (``speech_encoder``) takes SeamlessM4T's feature extractor
output ``[batch, frames, 160]`` with its per-frame mask: the Wav2Vec2-BERT
feature projection, Wav2Vec2-Conformer blocks (relative Transformer-XL, rotary or
no positions; the conv module zeroes padded frames, then a "same" depthwise conv
and BatchNorm) and a final LayerNorm; then ``x + intermediate_ffn(x) / 2`` (ReLU),
the adapter and ``inner_layer_norm``. Each adapter layer pools the frames with a
strided conv + GLU (one for the residual, one before attention), attends over the
pooled frames without positions and adds a ReLU feed-forward. The blocks'
LayerNorms use 1e-5, the final and the projection's ``layer_norm_eps``.

Padding, as transformers computes it: every adapter layer and the decoder's
cross-attention mask the pooled frames past ``(length + 2 * (kernel // 2) - kernel)
// stride + 1``, with ``length`` the real frames of the *input* (one pooling,
whatever ``num_adapter_layers`` is).

The text decoder (``text_decoder``) is M2M-100/NLLB's: embeddings scaled by
``sqrt(hidden)`` (``scale_embedding``), fairseq sinusoids at padding-aware
positions (computed in the graph, as for Speech2Text), pre-norm layers
(``self_attn``, ``cross_attention``, ``ffn``) and a final LayerNorm; ``lm_head``
is tied to ``shared``. The text-to-unit model and vocoder of a full
``SeamlessM4TModel`` checkpoint are not built (their tensors are ignored), nor is
its text encoder here: text-to-text is :mod:`mobius_audio.models.seamless_m4t_text`,
which shares :class:`SeamlessM4TTextDecoding` (the decoder and head). Graphs
follow the masked form of :class:`mobius_audio.tasks.SpeechToTextTask`; the
generation prompt is ``decoder_start_token_id`` then the target language's token
(:mod:`mobius_audio.seamless_generate`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    CrossAttention,
    LayerNorm,
    Linear,
    Seq2SeqAttention,
    TiedLMHead,
    get_activation,
    module_scope,
    padding_bias,
)
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models._conformer import length_mask
from mobius_audio.models.speech_to_text import Speech2TextDecoder
from mobius_audio.models.wav2vec2 import Conv1d, Wav2Vec2FeedForward
from mobius_audio.models.wav2vec2_bert import Wav2Vec2BertFeatureProjection
from mobius_audio.models.wav2vec2_conformer import (
    Wav2Vec2ConformerConvolutionModule,
    Wav2Vec2ConformerEncoder,
    Wav2Vec2ConformerEncoderLayer,
    Wav2Vec2ConformerSelfAttention,
    _const,
)

INT64 = ir.DataType.INT64
#: The names a tied checkpoint may save its one embedding table under (transformers ties them all).
TIED_TABLES = (
    "shared.weight",
    "text_encoder.embed_tokens.weight",
    "text_decoder.embed_tokens.weight",
    "lm_head.weight",
)
BLOCK_NORM_EPS = 1e-5  # transformers' nn.LayerNorm default, in the blocks, adapter and decoder


def config_int(hf: Any, name: str, minimum: int) -> int:
    """``hf.<name>`` as an int of at least ``minimum``, or a ConfigError naming it."""
    value = getattr(hf, name, None)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{hf.model_type}: {name}={value!r} must be an integer >= {minimum}")
    return value


@dataclass
class SeamlessM4TDecoderConfig:
    """The text decoder's fields, under Speech2Text's names: what speech- and text-to-text share."""

    model_type: str
    hidden_size: int
    vocab_size: int
    decoder_layers: int
    decoder_heads: int
    decoder_ffn_dim: int
    act: str
    scale_embedding: bool
    pad_token_id: int
    max_target_positions: int
    tie_word_embeddings: bool
    decoder_start_token_id: int | None
    eos_token_id: int | list[int] | None

    @classmethod
    def from_hf(cls, hf: Any):
        return cls(**cls.hf_fields(hf))

    @classmethod
    def hf_fields(cls, hf: Any) -> dict[str, Any]:
        """The decoder's fields read from a transformers config, checked; subclasses extend them."""
        d = config_int(hf, "hidden_size", 1)
        if d % config_int(hf, "decoder_attention_heads", 1):
            raise ConfigError(
                f"{hf.model_type}: hidden_size={d} must split into decoder_attention_heads"
            )
        if hf.pad_token_id is None:
            raise ConfigError(f"{hf.model_type}: positions count from pad_token_id; it is None")
        return dict(
            model_type=hf.model_type,
            hidden_size=d,
            vocab_size=config_int(hf, "vocab_size", 1),
            decoder_layers=config_int(hf, "decoder_layers", 1),
            decoder_heads=hf.decoder_attention_heads,
            decoder_ffn_dim=config_int(hf, "decoder_ffn_dim", 1),
            act=hf.activation_function,
            scale_embedding=bool(hf.scale_embedding),
            pad_token_id=config_int(hf, "pad_token_id", 0),
            max_target_positions=config_int(hf, "max_position_embeddings", 1),
            tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", True)),
            decoder_start_token_id=hf.decoder_start_token_id,
            eos_token_id=hf.eos_token_id,
        )


@dataclass
class SeamlessM4TConfig(SeamlessM4TDecoderConfig):
    """The decoder's fields, and the speech encoder's under the conformer modules' names."""

    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str
    layer_norm_eps: float
    position_embeddings_type: str | None
    rotary_embedding_base: float
    conv_depthwise_kernel_size: int
    feature_projection_input_dim: int
    add_adapter: bool
    num_adapter_layers: int
    adaptor_kernel_size: int
    adaptor_stride: int
    left_max_position_embeddings: int = 64
    right_max_position_embeddings: int = 8
    chunk_size: int | None = None  # v2's chunked attention
    left_chunk_num: int = -1
    conformer_norm_eps: float = BLOCK_NORM_EPS
    built_positions = (None, "relative", "rotary")

    @classmethod
    def hf_fields(cls, hf: Any) -> dict[str, Any]:
        """The decoder's and the speech encoder's fields, checked; v2 extends them."""
        kind = hf.position_embeddings_type
        if kind not in cls.built_positions:
            raise ConfigError(
                f"{hf.model_type} position_embeddings_type={kind!r} is not built; "
                f"built: {', '.join(map(repr, cls.built_positions))}"
            )
        fields = super().hf_fields(hf)
        if fields["hidden_size"] % config_int(hf, "speech_encoder_attention_heads", 1):
            raise ConfigError(
                f"{hf.model_type}: hidden_size={fields['hidden_size']} must split into "
                "speech_encoder_attention_heads"
            )
        kernel = config_int(hf, "conv_depthwise_kernel_size", 1)
        if kernel % 2 == 0:
            raise ConfigError(f"{hf.model_type}: conv_depthwise_kernel_size={kernel} must be odd")
        return dict(
            fields,
            num_hidden_layers=config_int(hf, "speech_encoder_layers", 1),
            num_attention_heads=hf.speech_encoder_attention_heads,
            intermediate_size=config_int(hf, "speech_encoder_intermediate_size", 1),
            hidden_act=hf.speech_encoder_hidden_act,
            layer_norm_eps=float(hf.layer_norm_eps),
            position_embeddings_type=kind,
            rotary_embedding_base=float(getattr(hf, "rotary_embedding_base", None) or 10000.0),
            conv_depthwise_kernel_size=kernel,
            feature_projection_input_dim=config_int(hf, "feature_projection_input_dim", 1),
            add_adapter=bool(hf.add_adapter),
            num_adapter_layers=config_int(hf, "num_adapter_layers", 0),
            adaptor_kernel_size=config_int(hf, "adaptor_kernel_size", 1),
            adaptor_stride=config_int(hf, "adaptor_stride", 1),
        )


# --- speech encoder ---------------------------------------------------------------------------


class SeamlessM4TConformerConvolutionModule(Wav2Vec2ConformerConvolutionModule):
    """Wav2Vec2-Conformer's module ("same" depthwise conv, BatchNorm), padded frames zeroed first."""

    def mask_padding(self, op, x, frame_mask):
        return op.Where(op.Unsqueeze(frame_mask, [2]), x, _const(op, 0.0, x))


class SeamlessM4TConformerEncoderLayer(Wav2Vec2ConformerEncoderLayer):
    conv_module_class = SeamlessM4TConformerConvolutionModule


class SeamlessM4TConformerEncoder(Wav2Vec2ConformerEncoder):
    layer_class = SeamlessM4TConformerEncoderLayer  # the rotary inv_freq is saved; final norm


def relu_feed_forward(config: SeamlessM4TConfig) -> Wav2Vec2FeedForward:
    """``intermediate_dense``, ReLU, ``output_dense``: the intermediate and adapter feed-forwards."""
    return Wav2Vec2FeedForward(replace(config, hidden_act="relu"))


def subsampled_lengths(op, lengths, kernel: int, stride: int):
    """transformers' adapter lengths: ``(length + 2 * (kernel // 2) - kernel) // stride + 1``."""
    return op.Add(op.Div(op.Add(lengths, 2 * (kernel // 2) - kernel), stride), 1)


class SeamlessM4TConformerAdapterLayer(nn.Module):
    """Strided conv + GLU pooling (residual and attention input), attention, ReLU feed-forward."""

    def __init__(self, config: SeamlessM4TConfig) -> None:
        super().__init__()
        d, k, s = config.hidden_size, config.adaptor_kernel_size, config.adaptor_stride
        self.residual_layer_norm = LayerNorm(d, BLOCK_NORM_EPS)
        self.residual_conv = Conv1d(d, 2 * d, k, stride=s, pad=s // 2)
        self.self_attn_layer_norm = LayerNorm(d, BLOCK_NORM_EPS)
        self.self_attn_conv = Conv1d(d, 2 * d, k, stride=s, pad=s // 2)
        self.self_attn = Wav2Vec2ConformerSelfAttention(
            replace(config, position_embeddings_type=None)
        )
        self.ffn_layer_norm = LayerNorm(d, BLOCK_NORM_EPS)
        self.ffn = relu_feed_forward(config)

    @staticmethod
    def pool(op, conv, x):  # [batch, frames, d] -> [batch, pooled, d]
        value, gate = op.Split(
            conv(op, op.Transpose(x, perm=[0, 2, 1])), axis=1, num_outputs=2, _outputs=2
        )
        return op.Transpose(op.Mul(value, op.Sigmoid(gate)), perm=[0, 2, 1])

    def forward(self, op, x, lengths):
        """``lengths`` int64 ``[batch, 1]``: the pooled frames each row keeps (see the module docstring)."""
        residual = self.pool(op, self.residual_conv, self.residual_layer_norm(op, x))
        h = self.pool(op, self.self_attn_conv, self.self_attn_layer_norm(op, x))
        bias = padding_bias(op, length_mask(op, lengths, h), x.dtype or ir.DataType.FLOAT)
        h = op.Add(self.self_attn(op, h, bias, None), residual)
        return op.Add(self.ffn(op, self.ffn_layer_norm(op, h)), h)


class SeamlessM4TConformerAdapter(nn.Module):
    def __init__(self, config: SeamlessM4TConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [SeamlessM4TConformerAdapterLayer(config) for _ in range(config.num_adapter_layers)]
        )

    def forward(self, op, x, lengths):
        for layer in self.layers:
            x = layer(op, x, lengths)
        return x


class SeamlessM4TSpeechEncoder(nn.Module):
    encoder_class = SeamlessM4TConformerEncoder

    def __init__(self, config: SeamlessM4TConfig) -> None:
        super().__init__()
        self.feature_projection = Wav2Vec2BertFeatureProjection(config)
        self.encoder = self.encoder_class(config)
        self.intermediate_ffn = relu_feed_forward(config)
        self.adapter = SeamlessM4TConformerAdapter(config) if config.add_adapter else None
        self.inner_layer_norm = LayerNorm(config.hidden_size, BLOCK_NORM_EPS)

    def forward(self, op, input_features, frame_mask, lengths):
        """``frame_mask`` bool ``[batch, frames]``; ``lengths`` the adapter's, int64 ``[batch, 1]``."""
        x, _ = self.encoder(op, self.feature_projection(op, input_features), frame_mask)
        x = op.Add(x, op.Mul(self.intermediate_ffn(op, x), _const(op, 0.5, x)))
        if self.adapter is not None:
            x = self.adapter(op, x, lengths)
        return self.inner_layer_norm(op, x)


# --- text decoder -----------------------------------------------------------------------------


class SeamlessM4TFeedForwardNetwork(nn.Module):
    def __init__(self, config: SeamlessM4TConfig, ffn_dim: int) -> None:
        super().__init__()
        self.fc1 = Linear(config.hidden_size, ffn_dim, bias=True)
        self.fc2 = Linear(ffn_dim, config.hidden_size, bias=True)
        self.act = get_activation(config.act)

    def forward(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, x)))


class SeamlessM4TDecoderLayer(nn.Module):
    """Pre-norm: causal self-attention, cross-attention over the speech encoder, feed-forward."""

    def __init__(self, config: SeamlessM4TConfig, heads: int, ffn_dim: int) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = Seq2SeqAttention(d, heads)
        self.self_attn_layer_norm = LayerNorm(d, BLOCK_NORM_EPS)
        self.cross_attention = CrossAttention(d, heads)
        self.cross_attention_layer_norm = LayerNorm(d, BLOCK_NORM_EPS)
        self.ffn = SeamlessM4TFeedForwardNetwork(config, ffn_dim)
        self.ffn_layer_norm = LayerNorm(d, BLOCK_NORM_EPS)

    def forward(self, op, x, causal, cross_bias, cross, past):
        h, present = self.self_attn(op, self.self_attn_layer_norm(op, x), causal, *past)
        x = op.Add(x, h)
        h = self.cross_attention(op, self.cross_attention_layer_norm(op, x), cross_bias, *cross)
        x = op.Add(x, h)
        return op.Add(x, self.ffn(op, self.ffn_layer_norm(op, x))), present


class SeamlessM4TDecoder(Speech2TextDecoder):
    """Speech2Text's decoder (scaled embeddings, fairseq sinusoids, final norm) with NLLB's layers."""

    layer_class = SeamlessM4TDecoderLayer


# --- the model --------------------------------------------------------------------------------


class SeamlessM4TTextDecoding(Model):
    """``text_decoder`` and ``lm_head`` (tied to ``shared``): the decoding half every SeamlessM4T
    task shares. A subclass adds its encoder and builds ``encode`` with :meth:`cross_caches`."""

    #: The module's embedding tables (a subclass adds its text encoder's).
    embedding_tables: tuple[str, ...] = ("text_decoder.embed_tokens.weight",)

    def __init__(self, config: SeamlessM4TDecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.text_decoder = SeamlessM4TDecoder(config)
        self.lm_head = (
            TiedLMHead(self.text_decoder.embed_tokens)
            if config.tie_word_embeddings
            else Linear(config.hidden_size, config.vocab_size)
        )

    def cache_shapes(self) -> tuple[int, int, int]:
        config = self.config
        return (
            config.decoder_layers,
            config.decoder_heads,
            config.hidden_size // config.decoder_heads,
        )

    def cross_caches(self, op, hidden) -> list:
        """Every decoder layer's cross-attention ``(key, value)`` of the encoder's states."""
        decoder = self.text_decoder
        cross = []
        for layer in decoder.layers:  # computed once by the encoder graph, read at every step
            with module_scope(op, decoder, layer, layer.cross_attention):
                cross.append(layer.cross_attention.project_kv(op, hidden))
        return cross

    def decode(self, op, input_ids, encoder_attention_mask, self_cache, cross_cache):
        """Logits and the self-attention presents."""
        with module_scope(op, self):
            hidden, presents = self.text_decoder(
                op, input_ids, encoder_attention_mask, self_cache, cross_cache
            )
            return self.lm_head(op, hidden), presents

    def sanitize(self, weights: dict) -> dict:
        """Tied (the default), ``shared``, both stacks' tables and ``lm_head`` are one tensor that a
        checkpoint saves under any of their names; untied, each has its own and ``shared`` is unused."""
        if self.config.tie_word_embeddings:
            table = next((weights[n] for n in TIED_TABLES if n in weights), None)
            for name in TIED_TABLES:
                weights.pop(name, None)
            if table is not None:
                weights.update(dict.fromkeys(self.embedding_tables, table))
        elif "shared.weight" in weights:
            shared = weights.pop("shared.weight")
            for name in self.embedding_tables:
                weights.setdefault(name, shared)
        return weights


class SeamlessM4TForSpeechToText(SeamlessM4TTextDecoding):
    """``speech_encoder``, then :class:`SeamlessM4TTextDecoding`'s decoder and head."""

    config_class = SeamlessM4TConfig
    task = "speech-to-text"
    speech_encoder_class = SeamlessM4TSpeechEncoder
    # A full SeamlessM4TModel checkpoint also holds what speech-to-text does not run.
    ignored = (
        "text_encoder.*",
        "t2u_model.*",
        "vocoder.*",
        "speech_encoder.encoder.layers.*.conv_module.batch_norm.num_batches_tracked",
    )

    def __init__(self, config: SeamlessM4TConfig) -> None:
        super().__init__(config)
        self.speech_encoder = self.speech_encoder_class(config)
        self._frame_mask = None

    def speech_input(self) -> tuple[str, list]:
        """The extractor's stacked fbank frames."""
        return "input_features", ["batch", "frames", self.config.feature_projection_input_dim]

    def _adapter_lengths(self, op, frame_mask):
        lengths = op.ReduceSum(op.Cast(frame_mask, to=INT64), [1], keepdims=1)  # [batch, 1]
        config = self.config
        return subsampled_lengths(op, lengths, config.adaptor_kernel_size, config.adaptor_stride)

    def encoder_attention_mask(self, op, input_features, attention_mask):
        """The pooled frames' mask, as transformers computes it for the decoder (one pooling's lengths).

        The task calls this hook with the graph's frame mask before :meth:`encode`,
        in the same build: the conformer reads that frame mask (kept here), the
        contract passes :meth:`encode` only the reduced one.
        """
        self._frame_mask = op.Cast(attention_mask, to=ir.DataType.BOOL)
        config = self.config
        states = op.Shape(input_features, start=1, end=2)
        if config.add_adapter:
            k, s = config.adaptor_kernel_size, config.adaptor_stride
            for _ in range(config.num_adapter_layers):  # Conv's output length, padding s // 2
                states = op.Add(op.Div(op.Add(states, 2 * (s // 2) - k), s), 1)
        steps = op.Range(
            op.Constant(value_int=0), op.Squeeze(states, [0]), op.Constant(value_int=1)
        )
        lengths = self._adapter_lengths(op, self._frame_mask)
        return op.Cast(op.Less(op.Unsqueeze(steps, [0]), lengths), to=INT64)  # [batch, states]

    def encode(self, op, input_features, encoder_attention_mask):
        """The encoder's states and every decoder layer's cross-attention ``(key, value)``."""
        if self._frame_mask is None:
            raise RuntimeError("encoder_attention_mask must be built before encode")
        lengths = self._adapter_lengths(op, self._frame_mask)
        hidden = self.speech_encoder(op, input_features, self._frame_mask, lengths)
        return hidden, self.cross_caches(op, hidden)


MODEL_TYPES = {"seamless_m4t": SeamlessM4TForSpeechToText}
