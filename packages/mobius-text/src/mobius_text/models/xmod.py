"""X-MOD: RoBERTa with a bottleneck adapter per language after each layer's MLP.

The graph serves one language, the config's ``default_language`` (what transformers
uses when no ``lang_ids`` are passed; the feature-extraction contract has no such
input): its adapters are built, the other languages' are left unread. A config
without a default language is refused. ``pre_norm`` moves each LayerNorm before its
block and adds ``encoder.LayerNorm``; ``adapter_layer_norm``,
``adapter_reuse_layer_norm`` and ``ln_before_adapter`` place the adapter's input norm
and residual as transformers does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation, module_scope
from mobius.errors import ConfigError
from mobius_text.models._bert_common import DecoderConfig, EncoderAsCausalLM, ResidualDense
from mobius_text.models.bert import BertEncoder, BertIntermediate, BertSelfAttention
from mobius_text.models.roberta import RobertaConfig, RobertaForFeatureExtraction, RobertaModel


@dataclass
class XmodConfig(RobertaConfig):
    language: str = "en_XX"  # the one language the graph serves (config.default_language)
    languages: tuple[str, ...] = ("en_XX",)
    pre_norm: bool = False
    adapter_size: int = 384  # hidden_size // adapter_reduction_factor
    adapter_layer_norm: bool = False
    adapter_reuse_layer_norm: bool = True
    ln_before_adapter: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        languages = tuple(str(name) for name in hf_config.languages)
        language = getattr(hf_config, "default_language", None)
        if language not in languages:
            raise ConfigError(
                f"X-MOD default_language {language!r} names none of the adapters {list(languages)}; "
                "the graph has no lang_ids input, so set default_language in config.json"
            )
        return dict(
            super().hf_fields(hf_config),
            language=language,
            languages=languages,
            pre_norm=bool(hf_config.pre_norm),
            adapter_size=hf_config.hidden_size // hf_config.adapter_reduction_factor,
            adapter_layer_norm=bool(hf_config.adapter_layer_norm),
            adapter_reuse_layer_norm=bool(hf_config.adapter_reuse_layer_norm),
            ln_before_adapter=bool(hf_config.ln_before_adapter),
        )


def owned_norm(op, owner: nn.Module, x):
    """``owner.LayerNorm(x)`` from the parent's forward, named ``<owner>.LayerNorm`` as stored."""
    with module_scope(op, owner):
        return owner.LayerNorm(op, x)


class XmodSelfOutput(ResidualDense):
    """``dense(x) + residual``; the parent applies ``LayerNorm`` before or after the block."""

    def __init__(self, config: XmodConfig) -> None:
        super().__init__(config.hidden_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)


class XmodAttention(nn.Module):
    """Post-norm ``LN(x + attn(x))``, or pre-norm ``x + attn(LN(x))``; the norm is ``output.LayerNorm``."""

    def __init__(self, config: XmodConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config.hidden_size, config.num_attention_heads)
        self.output = XmodSelfOutput(config)
        self.pre_norm = config.pre_norm

    def forward(self, op, x, bias):
        h = self.self(op, owned_norm(op, self.output, x) if self.pre_norm else x, bias)
        h = self.output(op, h, x)
        return h if self.pre_norm else owned_norm(op, self.output, h)


class XmodAdapter(nn.Module):
    """``dense2(act(dense1(x)))``: one language's bottleneck."""

    def __init__(self, config: XmodConfig) -> None:
        super().__init__()
        self.dense1 = Linear(config.hidden_size, config.adapter_size, bias=True)
        self.dense2 = Linear(config.adapter_size, config.hidden_size, bias=True)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.dense2(op, self.act(op, self.dense1(op, x)))


class XmodAdapters(nn.Module):
    """``adapter_modules``: the served language's adapter, under its name."""

    def __init__(self, config: XmodConfig) -> None:
        super().__init__()
        setattr(self, config.language, XmodAdapter(config))
        self.language = config.language

    def forward(self, op, x):
        return getattr(self, self.language)(op, x)


class XmodOutput(nn.Module):
    def __init__(self, config: XmodConfig) -> None:
        super().__init__()
        self.dense = Linear(config.intermediate_size, config.hidden_size, bias=True)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        eps = config.layer_norm_eps
        self.adapter_layer_norm = (
            LayerNorm(config.hidden_size, eps) if config.adapter_layer_norm else None
        )
        self.adapter_modules = XmodAdapters(config)
        self.reuse_norm, self.ln_before_adapter = (
            config.adapter_reuse_layer_norm,
            config.ln_before_adapter,
        )

    def forward(self, op, x, residual):
        h = op.Add(self.dense(op, x), residual)
        adapter_residual = h
        if self.adapter_layer_norm is not None:
            h = self.adapter_layer_norm(op, h)
        elif self.reuse_norm:
            h = self.LayerNorm(op, h)
        if self.ln_before_adapter:  # the adapter's residual is its normalised input
            adapter_residual = h
        return op.Add(self.adapter_modules(op, h), adapter_residual)


class XmodLayer(nn.Module):
    def __init__(self, config: XmodConfig) -> None:
        super().__init__()
        self.attention = XmodAttention(config)
        self.intermediate = BertIntermediate(
            config.hidden_size, config.intermediate_size, config.hidden_act
        )
        self.output = XmodOutput(config)
        self.pre_norm = config.pre_norm

    def forward(self, op, x, bias):
        x = self.attention(op, x, bias)
        h = owned_norm(op, self.output, x) if self.pre_norm else x
        h = self.output(op, self.intermediate(op, h), x)
        return h if self.pre_norm else owned_norm(op, self.output, h)


class XmodEncoder(BertEncoder):
    layer_class = XmodLayer

    def __init__(self, config: XmodConfig) -> None:
        super().__init__(config)
        self.pre_norm = config.pre_norm
        self.LayerNorm = (
            LayerNorm(config.hidden_size, config.layer_norm_eps) if self.pre_norm else None
        )

    def forward(self, op, x, bias):
        x = super().forward(op, x, bias)
        return self.LayerNorm(op, x) if self.LayerNorm is not None else x


class XmodModel(RobertaModel):
    encoder_class = XmodEncoder


class XmodForFeatureExtraction(RobertaForFeatureExtraction):
    """RoBERTa's heads on the X-MOD encoder (``roberta.*``), for the default language."""

    config_class = XmodConfig
    model_class = XmodModel

    @property
    def ignored(self) -> tuple[str, ...]:
        """RoBERTa's, and the adapters of the languages the graph does not serve."""
        others = [name for name in self.config.languages if name != self.config.language]
        adapters = f"{self.base_model_prefix}.encoder.layer.*.output.adapter_modules"
        return (*super().ignored, *(f"{adapters}.{name}.*" for name in others))


class XmodDecoderConfig(DecoderConfig, XmodConfig):
    pass


class XmodForCausalLM(EncoderAsCausalLM, XmodForFeatureExtraction):
    """X-MOD as a causal LM, for the default language."""

    config_class = XmodDecoderConfig


MODEL_TYPES = {"xmod": XmodForFeatureExtraction, "XmodForCausalLM": XmodForCausalLM}
