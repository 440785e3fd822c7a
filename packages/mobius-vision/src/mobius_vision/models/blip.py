"""BLIP captioning (``BlipForConditionalGeneration``): BLIP's ViT, then a BERT decoder that
cross-attends to the image.

An encoder–decoder over images (:mod:`mobius_vision.tasks.image_to_text`): the encoder
graph is the vision tower (BLIP-2's, with ``qkv`` biases: :mod:`.blip_2_vision`), its
normed ``last_hidden_state`` read by every decoder layer's cross-attention. The decoder
is transformers' ``BlipTextLMHeadModel``: BERT post-norm layers (self-attention through
the cache, cross-attention to the image, feed-forward; each block added to its input,
then ``LayerNorm``), learned absolute positions from 0, and a masked-LM head
(``cls.predictions``: dense, activation, ``LayerNorm``, then the vocabulary projection,
tied to the word embeddings). The feed-forward and post-norm output blocks are BERT's,
as the Q-Former has them (:mod:`._qformer`). Submodules carry the checkpoint's names
(``text_decoder.bert.encoder.layer.{i}.crossattention.self.key``...).

transformers' ``generate`` starts the decoder from the text config's ``bos_token_id``
(``[DEC]``) in place of the prompt's ``[CLS]``, drops the prompt's last token (its
``[SEP]``) and stops at ``sep_token_id``; ``mobius generate`` does the same
(:mod:`mobius_vision.image_to_text_runner`), so both ids are checked here. BLIP's question
answering and image–text matching checkpoints (another ``architectures``) are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    QFormerIntermediate,
    QFormerOutput,
    causal_bias,
    get_activation,
    merge_heads,
    module_scope,
    scaled_dot_product_attention,
    split_heads,
)
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.config import composed_config
from mobius_vision.models.blip_2_vision import (
    Blip2VisionConfig,
    Blip2VisionModel,
    Blip2VisionTransformer,
)


@dataclass
class BlipVisionConfig(Blip2VisionConfig):
    """BLIP's tower: BLIP-2's sizes; its ``qkv`` always has a bias (the config has no switch)."""

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return dict(super(Blip2VisionConfig, cls).hf_fields(hf_config), qkv_bias=True)


class BlipVisionModel(Blip2VisionModel):
    config_class = BlipVisionConfig


@dataclass(frozen=True)
class BlipTextConfig:
    """The sizes of a ``blip_text_model`` decoder and the ids its generation reads."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str
    layer_norm_eps: float
    max_position_embeddings: int
    encoder_hidden_size: int
    bos_token_id: int
    sep_token_id: int

    @classmethod
    def from_hf(cls, hf: Any) -> BlipTextConfig:
        ids = {name: getattr(hf, name, None) for name in ("bos_token_id", "sep_token_id")}
        for name, value in ids.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"blip text_config.{name} is not a token id: {value!r}")
        if hf.hidden_size % hf.num_attention_heads:
            raise ConfigError("blip text_config.hidden_size is not a multiple of its heads")
        return cls(
            vocab_size=int(hf.vocab_size),
            hidden_size=int(hf.hidden_size),
            num_hidden_layers=int(hf.num_hidden_layers),
            num_attention_heads=int(hf.num_attention_heads),
            intermediate_size=int(hf.intermediate_size),
            hidden_act=str(hf.hidden_act),
            layer_norm_eps=float(hf.layer_norm_eps),
            max_position_embeddings=int(hf.max_position_embeddings),
            encoder_hidden_size=int(hf.encoder_hidden_size),
            **ids,
        )


#: The one BLIP head built: its question answering and image-text matching checkpoints
#: (``text_encoder`` beside or instead of ``text_decoder``) decode otherwise.
CAPTIONING = "BlipForConditionalGeneration"


@dataclass
class BlipConfig:
    """The tower's config (by the registry) and the text decoder's: the image-to-text contract's
    fields (``hidden_size`` is the encoder's)."""

    model_type: str
    vision: Any
    text: BlipTextConfig

    @classmethod
    def from_hf(cls, hf_config: Any) -> BlipConfig:
        others = set(getattr(hf_config, "architectures", None) or ()) - {CAPTIONING}
        if others:
            raise ConfigError(
                f"blip checkpoint of {', '.join(sorted(others))}: mobius builds BLIP captioning "
                f"({CAPTIONING}) only, not question answering nor image-text matching"
            )
        vision = composed_config(hf_config.vision_config)
        text = BlipTextConfig.from_hf(hf_config.text_config)
        if text.encoder_hidden_size != vision.hidden_size:
            raise ConfigError(
                f"blip text_config.encoder_hidden_size ({text.encoder_hidden_size}) is not the "
                f"vision tower's width ({vision.hidden_size})"
            )
        return cls(model_type=hf_config.model_type, vision=vision, text=text)

    @property
    def hidden_size(self) -> int:
        return self.vision.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.text.vocab_size

    @property
    def num_channels(self) -> int:
        return self.vision.num_channels

    @property
    def image_size(self) -> tuple[int, int]:
        return self.vision.image_size


class BlipTextSelfAttention(nn.Module):
    """``query``/``key``/``value`` over heads: self-attention through the cache (the image's
    keys and values, for cross-attention, are projected once by :meth:`project_kv`)."""

    def __init__(self, hidden: int, heads: int, source: int) -> None:
        super().__init__()
        self.query = Linear(hidden, hidden, bias=True)
        self.key = Linear(source, hidden, bias=True)
        self.value = Linear(source, hidden, bias=True)
        self.num_heads, self.head_dim = heads, hidden // heads

    def split(self, op, x):
        return split_heads(op, x, head_dim=self.head_dim)

    def project_kv(self, op, states):
        """``(key, value)`` ``[batch, heads, positions, head_dim]`` of ``states``."""
        return self.split(op, self.key(op, states)), self.split(op, self.value(op, states))

    def forward(self, op, x, causal, past):
        """Self-attention: ``(heads merged [batch, seq, hidden], present (key, value))``."""
        q, (k, v) = self.split(op, self.query(op, x)), self.project_kv(op, x)
        y, key, value = scaled_dot_product_attention(
            op, q, k, v, causal, *past, num_heads=self.num_heads, num_kv_heads=self.num_heads,
            head_dim=self.head_dim, scale=self.head_dim**-0.5,
        )  # fmt: skip
        return merge_heads(op, y), (key, value)


class BlipTextCrossHeads(BlipTextSelfAttention):
    """The queries over the image's keys and values: every position is real, so no mask."""

    def forward(self, op, x, key, value):
        y = op.Attention(self.split(op, self.query(op, x)), key, value, scale=self.head_dim**-0.5)
        return merge_heads(op, y)


class BlipTextAttention(nn.Module):
    """Self-attention: ``self`` (the heads, through the cache) and ``output`` (projection,
    residual, norm)."""

    heads_class = BlipTextSelfAttention

    def __init__(self, config: BlipTextConfig, source: int) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.self = self.heads_class(hidden, config.num_attention_heads, source)
        self.output = QFormerOutput(hidden, config)

    def forward(self, op, x, causal, past):
        h, present = self.self(op, x, causal, past)
        return self.output(op, h, x), present


class BlipTextCrossAttention(BlipTextAttention):
    """``crossattention``: the heads over the image's keys and values."""

    heads_class = BlipTextCrossHeads

    def forward(self, op, x, key, value):
        return self.output(op, self.self(op, x, key, value), x)


class BlipTextLayer(nn.Module):
    """Self-attention, cross-attention to the image, feed-forward: each post-norm."""

    def __init__(self, config: BlipTextConfig) -> None:
        super().__init__()
        self.attention = BlipTextAttention(config, config.hidden_size)
        self.crossattention = BlipTextCrossAttention(config, config.encoder_hidden_size)
        self.intermediate = QFormerIntermediate(config)
        self.output = QFormerOutput(config.intermediate_size, config)

    def forward(self, op, x, causal, past, image_kv):
        x, present = self.attention(op, x, causal, past)
        x = self.crossattention(op, x, *image_kv)
        return self.output(op, self.intermediate(op, x), x), present


class BlipTextEmbeddings(nn.Module):
    """``LayerNorm(word + position)``, positions counted from the cache's length."""

    def __init__(self, config: BlipTextConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.word_embeddings = Embedding(config.vocab_size, d)
        self.position_embeddings = Embedding(config.max_position_embeddings, d)
        self.LayerNorm = LayerNorm(d, config.layer_norm_eps)

    def forward(self, op, input_ids, past_key):
        past = op.Squeeze(op.Shape(past_key, start=2, end=3), [0])
        length = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        positions = op.Unsqueeze(op.Range(past, op.Add(past, length), 1), [0])  # [1, seq]
        words = self.word_embeddings(op, input_ids)
        return self.LayerNorm(op, op.Add(words, self.position_embeddings(op, positions)))


class BlipTextEncoder(nn.Module):
    def __init__(self, config: BlipTextConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList([BlipTextLayer(config) for _ in range(config.num_hidden_layers)])


class BlipTextModel(nn.Module):
    """``bert``: the embeddings and the layers."""

    def __init__(self, config: BlipTextConfig) -> None:
        super().__init__()
        self.embeddings = BlipTextEmbeddings(config)
        self.encoder = BlipTextEncoder(config)


class BlipTextPredictionHeadTransform(nn.Module):
    def __init__(self, config: BlipTextConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, bias=True)
        self.act = get_activation(config.hidden_act)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x):
        return self.LayerNorm(op, self.act(op, self.dense(op, x)))


class BlipTextLMPredictionHead(nn.Module):
    def __init__(self, config: BlipTextConfig) -> None:
        super().__init__()
        self.transform = BlipTextPredictionHeadTransform(config)
        self.decoder = Linear(config.hidden_size, config.vocab_size, bias=True)

    def forward(self, op, x):
        return self.decoder(op, self.transform(op, x))


class BlipTextOnlyMLMHead(nn.Module):
    def __init__(self, config: BlipTextConfig) -> None:
        super().__init__()
        self.predictions = BlipTextLMPredictionHead(config)


class BlipTextLMHeadModel(nn.Module):
    """``text_decoder``: ``bert`` and its ``cls`` head."""

    def __init__(self, config: BlipTextConfig) -> None:
        super().__init__()
        self.bert = BlipTextModel(config)
        self.cls = BlipTextOnlyMLMHead(config)

    def forward(self, op, input_ids, self_cache, image_kv):
        """``(logits, presents)`` of ``input_ids`` after the cached positions."""
        past_key = self_cache[0][0]
        with module_scope(op, self.bert):
            x = self.bert.embeddings(op, input_ids, past_key)
            causal = causal_bias(op, input_ids, past_key, x.dtype)  # [batch, 1, seq, total]
            presents = []
            with module_scope(op, self.bert.encoder):
                for layer, past, kv in zip(
                    self.bert.encoder.layer, self_cache, image_kv, strict=True
                ):
                    x, present = layer(op, x, causal, past, kv)
                    presents.append(present)
        with module_scope(op, self.cls):
            return self.cls.predictions(op, x), presents


class BlipForConditionalGeneration(Model):
    """``vision_model`` (the encoder graph) and ``text_decoder`` (the decoder graph)."""

    config_class = BlipConfig
    task = "image-to-text"

    def __init__(self, config: BlipConfig) -> None:
        super().__init__()
        self.config = config
        self.vision_model = Blip2VisionTransformer(config.vision)
        self.text_decoder = BlipTextLMHeadModel(config.text)

    def cache_shapes(self) -> tuple[int, int, int]:
        text = self.config.text
        heads = text.num_attention_heads
        return text.num_hidden_layers, heads, text.hidden_size // heads

    def encode(self, op, pixel_values):
        """The tower's normed states, and each decoder layer's keys and values of them."""
        with module_scope(op, self):
            hidden, _ = self.vision_model(op, pixel_values)
            decoder = self.text_decoder
            cross = []
            for layer in decoder.bert.encoder.layer:
                heads = layer.crossattention.self
                chain = (decoder, decoder.bert, decoder.bert.encoder, layer)
                with module_scope(op, *chain, layer.crossattention, heads):
                    cross.append(heads.project_kv(op, hidden))
        return hidden, cross

    def decode(self, op, input_ids, self_cache, cross_cache):
        with module_scope(op, self):
            return self.text_decoder(op, input_ids, self_cache, cross_cache)

    def sanitize(self, weights: dict) -> dict:
        """The head's weight and bias where the checkpoint stores them tied (the word
        embeddings; ``cls.predictions.bias``)."""
        head = "text_decoder.cls.predictions."
        words = weights.get("text_decoder.bert.embeddings.word_embeddings.weight")
        if words is not None:
            weights.setdefault(f"{head}decoder.weight", words)
        bias = weights.pop(f"{head}bias", None)
        if bias is not None:
            weights.setdefault(f"{head}decoder.bias", bias)
        return weights


MODEL_TYPES = {
    "blip": BlipForConditionalGeneration,
    "blip_vision_model": BlipVisionModel,
}
