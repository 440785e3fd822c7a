"""Vision encoder–decoder (TrOCR, Donut): a registered vision backbone, a cross-attending decoder.

transformers' ``VisionEncoderDecoderModel`` pairs ``AutoModel`` of ``config.encoder``
(a bare backbone: ViT, DeiT...) with ``AutoModelForCausalLM`` of ``config.decoder``
made a cross-attending decoder. mobius composes the same way: the encoder is the
backbone (``model_class``) mobius registers for the encoder's ``model_type``, the
decoder one of :data:`DECODERS`. When the widths differ and the decoder's
cross-attention has no ``cross_attention_hidden_size`` of its own,
``enc_to_dec_proj`` maps the encoder's states to the decoder's width, as
transformers does. Graphs follow :mod:`mobius_vision.tasks.image_to_text`.

TrOCR's decoder is BART's post-norm decoder (mobius-text's), with its
cross-attention keys and values projected from ``cross_attention_hidden_size``, its
head named ``output_projection`` and, without learned positions (TrOCR-small), M2M-100's
fixed sinusoids at padding-aware positions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from onnxscript import nn

from mobius import registry
from mobius.components import CrossAttention, Linear, causal_bias, module_scope
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_text.models._sinusoids import table_tensor, tensor2tensor_sinusoids
from mobius_text.models.bart import (
    BartConfig,
    BartDecoder,
    BartDecoderLayer,
    PositionsFromRowZero,
    _length,
)
from mobius_text.models.m2m_100 import padding_aware_positions
from mobius_text.models.mbart import MBartDecoder
from mobius_vision.config import composed_config


@dataclass
class TrOCRConfig(BartConfig):
    """TrOCR's decoder: BART's sizes, its cross-attention source width, its embedding norm."""

    cross_attention_hidden_size: int | None = None  # None: the decoder's width
    layernorm_embedding: bool = True
    learned_positions: bool = True  # False: fixed sinusoids at padding-aware positions

    @classmethod
    def from_hf(cls, hf: Any) -> TrOCRConfig:
        return cls(
            model_type=hf.model_type,
            vocab_size=hf.vocab_size,
            hidden_size=hf.d_model,
            # No encoder: BART's decoder layer starts from its encoder layer, so the
            # encoder sizes repeat the decoder's.
            encoder_layers=0,
            decoder_layers=hf.decoder_layers,
            encoder_heads=hf.decoder_attention_heads,
            decoder_heads=hf.decoder_attention_heads,
            encoder_ffn_dim=hf.decoder_ffn_dim,
            decoder_ffn_dim=hf.decoder_ffn_dim,
            max_position_embeddings=hf.max_position_embeddings,
            act=hf.activation_function,
            scale_embedding=bool(hf.scale_embedding),
            tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", True)),
            pad_token_id=hf.pad_token_id,
            decoder_start_token_id=hf.decoder_start_token_id,
            eos_token_id=hf.eos_token_id,
            cross_attention_hidden_size=hf.cross_attention_hidden_size,
            layernorm_embedding=bool(hf.layernorm_embedding),
            learned_positions=bool(hf.use_learned_position_embeddings),
        )


class TrOCRDecoderLayer(BartDecoderLayer):
    """BART's post-norm decoder layer; keys and values come from ``cross_attention_hidden_size``."""

    def __init__(self, config: TrOCRConfig) -> None:
        super().__init__(config)
        source = config.cross_attention_hidden_size or config.hidden_size
        self.encoder_attn = CrossAttention(
            config.hidden_size, config.decoder_heads, source_size=source
        )


class ImageSourceDecoder(BartDecoder):
    """BART's decoder stack over an image: every source position is real, so no cross bias."""

    def forward(self, op, input_ids, self_cache, cross_cache):
        x = self.embed(op, input_ids, _length(op, self_cache[0][0], 2))
        causal = causal_bias(op, input_ids, self_cache[0][0], x.dtype)  # [batch, 1, target, total]
        presents = []
        for layer, past, (key, value) in zip(self.layers, self_cache, cross_cache, strict=True):
            x, present = layer(op, x, causal, (None, key, value), past)
            presents.append(present)
        return self.finish(op, x), presents


class TrOCRDecoder(ImageSourceDecoder):
    layer_class = TrOCRDecoderLayer


class TrOCRDecoderWithoutEmbeddingNorm(TrOCRDecoder):
    """``layernorm_embedding: false``."""

    embedding_norm = False


class TrOCRSinusoidalPositions(PositionsFromRowZero):
    """Fixed sinusoids (``sanitize`` computes the table: checkpoints lack it), read from row 0
    at padding-aware positions; rows for ``max_position_embeddings`` past ``padding_idx``."""

    def __init__(self, num_positions: int, dim: int, padding_idx: int | None = None) -> None:
        if padding_idx is None:
            raise ConfigError("TrOCR's sinusoidal positions need a pad_token_id")
        rows = num_positions + padding_idx + 1
        super().__init__(rows, dim)
        self.rows, self.padding_idx = rows, padding_idx


class TrOCRSinusoidalDecoder(TrOCRDecoder):
    """``use_learned_position_embeddings: false`` (TrOCR-small): M2M-100's positions."""

    positions_class = TrOCRSinusoidalPositions

    def position_ids(self, op, input_ids, past_length):
        return padding_aware_positions(op, input_ids, self.embed_positions.padding_idx, past_length)


class TrOCRSinusoidalDecoderWithoutEmbeddingNorm(TrOCRSinusoidalDecoder):
    embedding_norm = False


class MBartImageDecoder(ImageSourceDecoder):
    """mBART's decoder (Donut's): pre-norm layers and a final ``layer_norm``."""

    layer_class = MBartDecoder.layer_class
    final_norm = MBartDecoder.final_norm


class DecoderWrapper(nn.Module):
    """``model.decoder``: the nesting of transformers' ``*ForCausalLM`` checkpoints."""

    def __init__(self, stack: ImageSourceDecoder) -> None:
        super().__init__()
        self.decoder = stack


class BartForCausalLM(nn.Module):
    """A decoder stack and its output head (``head_name``), tied to the token embeddings
    when the config says so and the checkpoint stores no head of its own."""

    config_class = BartConfig
    head_name = "lm_head"

    def __init__(self, config: BartConfig) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderWrapper(self.make_stack(config))
        setattr(self, self.head_name, Linear(config.hidden_size, config.vocab_size, bias=False))

    def make_stack(self, config) -> ImageSourceDecoder:
        return ImageSourceDecoder(config)

    @property
    def stack(self) -> ImageSourceDecoder:
        return self.model.decoder

    def forward(self, op, input_ids, self_cache, cross_cache):
        with module_scope(op, self.model):
            hidden, presents = self.stack(op, input_ids, self_cache, cross_cache)
        return getattr(self, self.head_name)(op, hidden), presents

    def complete(self, weights: dict, prefix: str) -> None:
        """What the checkpoint under ``prefix`` leaves out: a tied one stores the token
        embeddings alone, and the head reads them (an untied one without a head fails)."""
        embeddings = weights.get(f"{prefix}model.decoder.embed_tokens.weight")
        if self.config.tie_word_embeddings and embeddings is not None:
            weights.setdefault(f"{prefix}{self.head_name}.weight", embeddings)


class MBartForCausalLM(BartForCausalLM):
    def make_stack(self, config) -> ImageSourceDecoder:
        return MBartImageDecoder(config)


class TrOCRForCausalLM(BartForCausalLM):
    """TrOCR's decoder; its head is ``output_projection``."""

    config_class = TrOCRConfig
    head_name = "output_projection"

    #: The stack by (learned positions, embedding norm).
    stacks: ClassVar[dict[tuple[bool, bool], type]] = {
        (True, True): TrOCRDecoder,
        (True, False): TrOCRDecoderWithoutEmbeddingNorm,
        (False, True): TrOCRSinusoidalDecoder,
        (False, False): TrOCRSinusoidalDecoderWithoutEmbeddingNorm,
    }

    def make_stack(self, config: TrOCRConfig) -> ImageSourceDecoder:
        return self.stacks[config.learned_positions, config.layernorm_embedding](config)

    def complete(self, weights: dict, prefix: str) -> None:
        """Also the sinusoidal table, which transformers computes at load."""
        super().complete(weights, prefix)
        positions = self.stack.embed_positions
        if isinstance(positions, TrOCRSinusoidalPositions):
            dim = self.config.hidden_size
            table = tensor2tensor_sinusoids(positions.rows, dim, positions.padding_idx)
            weights.setdefault(f"{prefix}model.decoder.embed_positions.weight", table_tensor(table))


#: The decoders a vision encoder–decoder composes, by ``config.decoder.model_type``.
DECODERS: dict[str, type] = {
    "trocr": TrOCRForCausalLM,
    "bart": BartForCausalLM,
    "mbart": MBartForCausalLM,
}


@dataclass
class VisionEncoderDecoderConfig:
    """The normalised encoder (by the registry) and decoder configs, and the generation start."""

    model_type: str
    encoder: Any
    decoder: Any
    decoder_start_token_id: int

    @classmethod
    def from_hf(cls, hf_config: Any) -> VisionEncoderDecoderConfig:
        decoder_type = hf_config.decoder.model_type
        if decoder_type not in DECODERS:
            raise ConfigError(
                f"vision-encoder-decoder with a {decoder_type!r} decoder is not supported "
                f"(decoders: {', '.join(sorted(DECODERS))})"
            )
        encoder = composed_config(hf_config.encoder)
        if getattr(encoder, "pooler", False):  # transformers' backbone has one; nothing reads it
            encoder = dataclasses.replace(encoder, pooler=False)
        start = first_int(
            hf_config.decoder_start_token_id, hf_config.decoder.decoder_start_token_id
        )
        return cls(
            model_type=hf_config.model_type,
            encoder=encoder,
            decoder=DECODERS[decoder_type].config_class.from_hf(hf_config.decoder),
            decoder_start_token_id=start,
        )

    @property
    def hidden_size(self) -> int:
        """The encoder's width: ``last_hidden_state``'s (a Swin's last stage: ``num_features``)."""
        encoder = self.encoder
        return encoder.num_features if hasattr(encoder, "num_features") else encoder.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.decoder.vocab_size

    @property
    def num_channels(self) -> int:
        return self.encoder.num_channels

    @property
    def image_size(self) -> tuple[int, int]:
        return self.encoder.image_size


def first_int(*values: Any) -> int:
    """The first of ``values`` that is an int (the top config's start token, else the decoder's)."""
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    raise ConfigError("vision-encoder-decoder config has no decoder_start_token_id")


def vision_backbone(config) -> tuple[nn.Module, tuple[str, ...]]:
    """The bare backbone (``model_class``) mobius registers for ``config.model_type``, and the
    checkpoint names its build ignores, under ``encoder.``.

    Ignored names under the family's prefix (``vit.pooler.*``) move to ``encoder.``;
    patterns for any depth (``*.relative_position_index``) stay; the head's go.
    """
    top = registry.get(config.model_type).module_class()
    backbone = getattr(top, "model_class", None)
    if backbone is None:
        raise ConfigError(f"{config.model_type} is not a vision encoder mobius can compose")
    prefix = f"{getattr(top, 'base_model_prefix', '')}."
    patterns = top(config).ignored
    ignored = [p for p in patterns if p.startswith("*")]
    ignored += ["encoder." + p[len(prefix) :] for p in patterns if p.startswith(prefix)]
    return backbone(config), tuple(ignored)


class VisionEncoderDecoderModel(Model):
    """``encoder`` (a vision backbone), optional ``enc_to_dec_proj``, ``decoder`` (a causal LM)."""

    config_class = VisionEncoderDecoderConfig
    task = "image-to-text"

    def __init__(self, config: VisionEncoderDecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder, encoder_ignored = vision_backbone(config.encoder)
        # transformers' bare backbone carries a pooler no output reads.
        self.ignored = ("encoder.pooler.*", *encoder_ignored)
        self.decoder = DECODERS[config.decoder.model_type](config.decoder)
        width, decoder_width = config.hidden_size, config.decoder.hidden_size
        own_source = getattr(config.decoder, "cross_attention_hidden_size", None)
        project = width != decoder_width and own_source is None
        self.enc_to_dec_proj = Linear(width, decoder_width, bias=True) if project else None

    def cache_shapes(self) -> tuple[int, int, int]:
        decoder = self.config.decoder
        return (
            decoder.decoder_layers,
            decoder.decoder_heads,
            decoder.hidden_size // decoder.decoder_heads,
        )

    def encode(self, op, pixel_values):
        with module_scope(op, self):
            outputs = self.encoder(op, pixel_values)
            hidden = outputs[0] if isinstance(outputs, tuple) else outputs
            source = hidden
            if self.enc_to_dec_proj is not None:
                source = self.enc_to_dec_proj(op, hidden)
            cross = []
            stack = self.decoder.stack
            for layer in stack.layers:  # computed once here, read at every decoder step
                chain = (self.decoder, self.decoder.model, stack, layer, layer.encoder_attn)
                with module_scope(op, *chain):
                    cross.append(layer.encoder_attn.project_kv(op, source))
        return hidden, cross

    def decode(self, op, input_ids, self_cache, cross_cache):
        with module_scope(op, self):
            return self.decoder(op, input_ids, self_cache, cross_cache)

    def sanitize(self, weights: dict) -> dict:
        self.decoder.complete(weights, "decoder.")
        return weights


MODEL_TYPES = {"vision-encoder-decoder": VisionEncoderDecoderModel}
