"""A normalised architecture config, built from a HuggingFace config.

HF configs name the same idea many ways (``n_head``, ``num_attention_heads``;
``rope_scaling`` or ``rope_parameters``). Model code reads only
:class:`ArchitectureConfig` (or a family's subclass of it), never the HF object.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar


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


def first_of(hf_config: Any, *names: str, default: Any = None) -> Any:
    """The first of ``names`` that ``hf_config`` sets (not None), else ``default``.

    HF configs spell one idea several ways (``num_attention_heads``, ``n_head``).
    """
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

    #: The model type onnxruntime-genai's generator runs the family as (``model.type``
    #: of ``genai_config.json``); None: its generic decoder class
    #: (:data:`mobius.genai.GENERIC_DECODER_TYPE`). A family may also answer per
    #: instance (a property reading ``model_type``).
    genai_type: ClassVar[str | None] = None

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
        hidden = first_of(hf_config, "hidden_size", "n_embd", "d_model")
        heads = first_of(hf_config, "num_attention_heads", "n_head")
        kv_heads = first_of(hf_config, "num_key_value_heads", "num_kv_heads", default=heads)
        layers = first_of(hf_config, "num_hidden_layers", "n_layer")
        head_dim = first_of(hf_config, "head_dim", default=None) or hidden // heads
        layer_types = list(getattr(hf_config, "layer_types", None) or [])
        sliding = getattr(hf_config, "sliding_window", None)
        if sliding is not None and not layer_types:
            layer_types = ["sliding_attention"] * layers
        return dict(
            model_type=hf_config.model_type,
            vocab_size=hf_config.vocab_size,
            hidden_size=hidden,
            intermediate_size=first_of(
                hf_config, "intermediate_size", "n_inner", default=4 * hidden
            ),
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            max_position_embeddings=first_of(
                hf_config, "max_position_embeddings", "n_positions", default=2048
            ),
            hidden_act=first_of(hf_config, "hidden_act", "activation_function", default="silu"),
            rms_norm_eps=first_of(hf_config, "rms_norm_eps", "layer_norm_eps", default=1e-6),
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


@dataclass
class EncoderConfig:
    """The fields every encoder family needs, normalised from an HF config, and the head to build.

    ``head`` is one of :data:`~mobius.options.ENCODER_HEADS`; ``pooling`` and ``normalize`` shape the
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
        hidden = first_of(hf_config, "hidden_size", "dim", "d_model")
        return dict(
            model_type=hf_config.model_type,
            vocab_size=hf_config.vocab_size,
            hidden_size=hidden,
            intermediate_size=first_of(
                hf_config, "intermediate_size", "hidden_dim", default=4 * hidden
            ),
            num_hidden_layers=first_of(hf_config, "num_hidden_layers", "n_layers"),
            num_attention_heads=first_of(hf_config, "num_attention_heads", "n_heads"),
            max_position_embeddings=first_of(hf_config, "max_position_embeddings", default=512),
            type_vocab_size=first_of(hf_config, "type_vocab_size", default=0),
            hidden_act=first_of(hf_config, "hidden_act", "activation", default="gelu"),
            layer_norm_eps=first_of(hf_config, "layer_norm_eps", "norm_eps", default=1e-12),
            pad_token_id=getattr(hf_config, "pad_token_id", None),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", True)),
            num_labels=int(getattr(hf_config, "num_labels", 2) or 2),
        )
