"""A normalised architecture config, built from a HuggingFace config.

HF configs name the same idea many ways (``n_head``, ``num_attention_heads``;
``rope_scaling`` or ``rope_parameters``). Model code reads only
:class:`ArchitectureConfig` (or a family's subclass of it), never the HF object.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mobius.errors import ConfigError


@dataclass
class RopeConfig:
    """Rotary position embedding settings, in the vocabulary of transformers' ``rope_parameters``."""

    rope_type: str = "default"  # default | linear | dynamic | llama3 | longrope | yarn
    theta: float = 10000.0
    partial_rotary_factor: float = 1.0
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    long_factor: list[float] | None = None
    short_factor: list[float] | None = None
    truncate: bool = True

    @classmethod
    def from_hf(cls, hf_config: Any) -> RopeConfig:
        """Read ``rope_parameters`` (transformers 5) or ``rope_scaling`` + ``rope_theta`` (older)."""
        params = dict(getattr(hf_config, "rope_parameters", None) or {})
        if not params:
            params = dict(getattr(hf_config, "rope_scaling", None) or {})
            if getattr(hf_config, "rope_theta", None) is not None:
                params.setdefault("rope_theta", hf_config.rope_theta)
        rope_type = params.get("rope_type", params.get("type", "default"))
        partial = params.get(
            "partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", None)
        )
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in params.items() if k in known and v is not None}
        for explicit in ("rope_type", "partial_rotary_factor"):
            kwargs.pop(explicit, None)
        return cls(
            **kwargs,
            rope_type=rope_type,
            theta=float(params.get("rope_theta") or 10000.0),  # None: a NoPE model (OLMo Hybrid)
            partial_rotary_factor=float(partial) if partial is not None else 1.0,
        )


def _first(hf_config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(hf_config, name, None)
        if value is not None:
            return value
    return default


@dataclass
class ArchitectureConfig:
    """The fields every decoder family needs, normalised from an HF config.

    Families subclass this and extend :meth:`from_hf` for what only they have.
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int = 2048
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    rope: RopeConfig | None = field(default_factory=RopeConfig)
    sliding_window: int | None = None
    # One entry per layer: "full_attention" or "sliding_attention".
    layer_types: list[str] = field(default_factory=list)
    bos_token_id: int | list[int] | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None

    def __post_init__(self) -> None:
        if not self.layer_types:
            self.layer_types = ["full_attention"] * self.num_hidden_layers
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )

    @classmethod
    def from_hf(cls, hf_config: Any) -> ArchitectureConfig:
        """Normalise a transformers config object."""
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        """The constructor arguments read from ``hf_config``; subclasses add to this dict."""
        hidden = _first(hf_config, "hidden_size", "n_embd", "d_model")
        heads = _first(hf_config, "num_attention_heads", "n_head")
        kv_heads = _first(hf_config, "num_key_value_heads", "num_kv_heads", default=heads)
        layers = _first(hf_config, "num_hidden_layers", "n_layer")
        head_dim = _first(hf_config, "head_dim", default=None) or hidden // heads
        layer_types = list(getattr(hf_config, "layer_types", None) or [])
        sliding = getattr(hf_config, "sliding_window", None)
        if sliding is not None and not layer_types:
            layer_types = ["sliding_attention"] * layers
        return dict(
            model_type=hf_config.model_type,
            vocab_size=hf_config.vocab_size,
            hidden_size=hidden,
            intermediate_size=_first(hf_config, "intermediate_size", "n_inner", default=4 * hidden),
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            max_position_embeddings=_first(
                hf_config, "max_position_embeddings", "n_positions", default=2048
            ),
            hidden_act=_first(hf_config, "hidden_act", "activation_function", default="silu"),
            rms_norm_eps=_first(hf_config, "rms_norm_eps", "layer_norm_eps", default=1e-6),
            attention_bias=bool(getattr(hf_config, "attention_bias", False)),
            mlp_bias=bool(getattr(hf_config, "mlp_bias", False)),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
            rope=RopeConfig.from_hf(hf_config),
            sliding_window=sliding,
            layer_types=layer_types,
            bos_token_id=getattr(hf_config, "bos_token_id", None),
            eos_token_id=getattr(hf_config, "eos_token_id", None),
            pad_token_id=getattr(hf_config, "pad_token_id", None),
        )


#: Heads an encoder build can add to ``last_hidden_state`` (``mobius build --head``).
ENCODER_HEADS = (
    "none",
    "masked-lm",
    "sequence-classification",
    "token-classification",
    "sentence-embedding",
)
POOLING_MODES = ("mean", "cls", "max")


@dataclass
class EncoderConfig:
    """The fields every encoder family needs, normalised from an HF config, and the head to build.

    ``head`` is one of :data:`ENCODER_HEADS`; ``pooling`` and ``normalize`` shape the
    ``sentence-embedding`` head. Families subclass this and extend :meth:`hf_fields`.
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 0
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = None
    tie_word_embeddings: bool = True
    num_labels: int = 2
    head: str = "none"
    pooling: str = "mean"
    normalize: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf(cls, hf_config: Any) -> EncoderConfig:
        """Normalise a transformers config object (the head stays ``"none"``)."""
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        """The constructor arguments read from ``hf_config``; subclasses add to this dict."""
        hidden = _first(hf_config, "hidden_size", "dim", "d_model")
        return dict(
            model_type=hf_config.model_type,
            vocab_size=hf_config.vocab_size,
            hidden_size=hidden,
            intermediate_size=_first(
                hf_config, "intermediate_size", "hidden_dim", default=4 * hidden
            ),
            num_hidden_layers=_first(hf_config, "num_hidden_layers", "n_layers"),
            num_attention_heads=_first(hf_config, "num_attention_heads", "n_heads"),
            max_position_embeddings=_first(hf_config, "max_position_embeddings", default=512),
            type_vocab_size=_first(hf_config, "type_vocab_size", default=0),
            hidden_act=_first(hf_config, "hidden_act", "activation", default="gelu"),
            layer_norm_eps=_first(hf_config, "layer_norm_eps", "norm_eps", default=1e-12),
            pad_token_id=getattr(hf_config, "pad_token_id", None),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", True)),
            num_labels=int(getattr(hf_config, "num_labels", 2) or 2),
        )


#: Heads a vision encoder build can add to its features (``mobius build --head``).
VISION_HEADS = ("none", "image-classification")


def image_size_pair(value: Any) -> tuple[int, int]:
    """``(height, width)`` from an HF ``image_size`` (an int, or a pair)."""
    if isinstance(value, (list, tuple)):
        height, width = value
        return int(height), int(width)
    return int(value), int(value)


@dataclass
class VisionConfig:
    """What every vision encoder family shares: the input image and the head to build.

    ``head`` is one of :data:`VISION_HEADS`. Families subclass this and extend
    :meth:`hf_fields` with their own sizes.
    """

    model_type: str
    image_size: tuple[int, int]
    num_channels: int = 3
    num_labels: int = 2
    head: str = "none"
    #: The checkpoint's architecture class names (which heads its weights have).
    architectures: tuple[str, ...] = ()

    def require_no_head(self) -> None:
        """Refuse a classifier head, for the towers transformers ships without one."""
        if self.head != "none":
            raise ConfigError(
                f"{self.model_type} has no classifier head; build it with --head none"
            )

    @classmethod
    def from_hf(cls, hf_config: Any) -> VisionConfig:
        """Normalise a transformers config object (the head stays ``"none"``)."""
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        """The constructor arguments read from ``hf_config``; subclasses add to this dict."""
        return dict(
            model_type=hf_config.model_type,
            image_size=image_size_pair(_first(hf_config, "image_size", default=224)),
            num_channels=int(_first(hf_config, "num_channels", default=3)),
            num_labels=int(getattr(hf_config, "num_labels", 2) or 2),
            architectures=tuple(getattr(hf_config, "architectures", None) or ()),
        )


#: Text-config fields a causal LM's own output head applies, and the values that turn them off.
TEXT_HEAD_FIELDS = {"logit_scale": 1.0, "final_logit_softcapping": None, "logits_scaling": 1.0}

#: The package layouts of a vision–language build (``--form``).
VISION_LANGUAGE_FORMS = ("split", "single")


@dataclass
class VisionLanguageConfig:
    """A vision–language model: the configs of its vision tower and text decoder, composed.

    ``vision`` and ``text`` are the normalised configs of whatever the registry
    holds for ``vision_config.model_type`` and ``text_config.model_type`` (read by
    those families' own config classes), so a LLaVA over Qwen2 gets mobius-text's
    Qwen2. ``form`` is one of :data:`VISION_LANGUAGE_FORMS`. Families subclass this
    and extend :meth:`hf_fields` with their projector's settings.
    """

    model_type: str
    vision: Any
    text: Any
    image_token_id: int
    form: str = "split"

    @classmethod
    def from_hf(cls, hf_config: Any) -> VisionLanguageConfig:
        """Normalise a transformers config object; the sub-configs go through the registry."""
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        """The constructor arguments read from ``hf_config``; subclasses add to this dict."""
        return dict(
            model_type=hf_config.model_type,
            vision=composed_config(hf_config.vision_config),
            text=composed_config(cls.text_hf_config(hf_config)),
            image_token_id=int(_first(hf_config, "image_token_id", "image_token_index")),
        )

    #: Output-head fields of :data:`TEXT_HEAD_FIELDS` that the family's transformers class
    #: applies itself (Gemma 3 and PaliGemma soft-cap their logits).
    text_head_applied: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def text_hf_config(cls, hf_config: Any) -> Any:
        """The transformers config the text decoder is built from.

        transformers' VL classes put a bare ``lm_head`` on the text model, tied or
        not by the top-level ``tie_word_embeddings``, so the scaling and capping a
        text-only causal LM applies in its head are turned off, except those in
        :attr:`text_head_applied`.
        """
        text = copy.deepcopy(hf_config.text_config)
        if getattr(hf_config, "tie_word_embeddings", None) is not None:
            text.tie_word_embeddings = hf_config.tie_word_embeddings  # the VL class ties by its own
        for name, neutral in TEXT_HEAD_FIELDS.items():
            if name not in cls.text_head_applied and getattr(text, name, None) is not None:
                setattr(text, name, neutral)
        return text

    @property
    def vocab_size(self) -> int:
        return self.text.vocab_size


def composed_config(hf_sub_config: Any) -> Any:
    """The normalised config of a sub-model, by the family the registry holds for its type."""
    from mobius._registry import registry

    return registry.get(hf_sub_config.model_type).config_class().from_hf(hf_sub_config)


class ComponentConfig:
    """A diffusers component's ``config.json`` read as attributes (``config.block_out_channels``).

    diffusers saves every constructor argument of a component, so a family's config
    dataclass reads the fields it needs and refuses what it does not build. The
    component's class (``_class_name``) is its ``model_type``: the registry key.
    Lists stay lists; a missing field reads as ``AttributeError`` (use ``getattr``
    with the diffusers default for fields older configs lack).
    """

    def __init__(self, fields: dict[str, Any]) -> None:
        self.__dict__.update(fields)
        self.model_type = fields["_class_name"]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __repr__(self) -> str:
        return f"ComponentConfig({self.model_type})"
