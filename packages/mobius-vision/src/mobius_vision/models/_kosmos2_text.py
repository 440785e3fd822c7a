"""Kosmos-2's text decoder: XGLM's (mobius-text) with two more LayerNorms and HF's position rows.

The delta from XGLM:

- each attention normalises its merged heads (``self_attn.inner_attn_ln``) before
  ``out_proj``;
- the MLP sits under ``ffn.`` and normalises its hidden activation (``ffn.ffn_layernorm``)
  before ``fc2``;
- every LayerNorm reads the config's ``layer_norm_eps`` (XGLM's ignore it);
- ``position_ids`` are rows of the sinusoidal table as transformers' Kosmos-2 takes them:
  a prompt counts from ``pad_token_id + 1`` (the row ``pad_token_id`` is zero), so the
  runner and the parity kit start positions there (:attr:`first_position`).

``kosmos_2_text_model`` is no checkpoint type of its own (transformers maps no causal LM
to it), so it is not registered: :mod:`.kosmos2` composes it, and its parity test verifies it.
"""

from __future__ import annotations

from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_text.models._gpt_common import (
    FixedPositions,
    PreNormDecoderLayer,
    QKVOutAttention,
)
from mobius_text.models._sinusoids import tensor2tensor_sinusoids
from mobius_text.models.xglm import XGLMConfig, XGLMForCausalLM, XGLMModel


class Kosmos2TextConfig(XGLMConfig):
    """XGLM's fields, with the LayerNorms' epsilon the config gives."""

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        pad = fields["pad_token_id"]
        if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
            raise ConfigError(f"kosmos-2 text_config.pad_token_id {pad!r} is not a row index")
        return dict(fields, rms_norm_eps=float(hf_config.layer_norm_eps))

    @property
    def first_position(self) -> int:
        """The table row of a prompt's first token: the one after the padding row."""
        return self.pad_token_id + 1


class Kosmos2TextAttention(QKVOutAttention):
    """XGLM's attention with ``inner_attn_ln`` on the merged heads."""

    def __init__(self, hidden: int, heads: int, eps: float) -> None:
        super().__init__(hidden, heads, (hidden // heads) ** -0.5, bias=True, out_bias=True)
        self.inner_attn_ln = LayerNorm(hidden, eps)

    def project_out(self, op, y):
        return self.out_proj(op, self.inner_attn_ln(op, y))


class Kosmos2TextFFN(nn.Module):
    """``fc2(ffn_layernorm(act(fc1(x))))``."""

    def __init__(self, hidden: int, ffn_dim: int, act: str, eps: float) -> None:
        super().__init__()
        self.fc1 = Linear(hidden, ffn_dim, bias=True)
        self.act = get_activation(act)
        self.ffn_layernorm = LayerNorm(ffn_dim, eps)
        self.fc2 = Linear(ffn_dim, hidden, bias=True)

    def forward(self, op, x):
        return self.fc2(op, self.ffn_layernorm(op, self.act(op, self.fc1(op, x))))


class Kosmos2TextBlock(PreNormDecoderLayer):
    """XGLM's pre-norm block with its MLP under ``ffn.`` (:class:`Kosmos2TextFFN`)."""

    def __init__(self, config: Kosmos2TextConfig) -> None:
        nn.Module.__init__(self)  # not the base's: it would make fc1/fc2 at the block's level
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = Kosmos2TextAttention(hidden, config.num_attention_heads, eps)
        self.self_attn_layer_norm = LayerNorm(hidden, eps)
        self.ffn = Kosmos2TextFFN(hidden, config.intermediate_size, config.hidden_act, eps)
        self.final_layer_norm = LayerNorm(hidden, eps)

    def feed_forward(self, op, x):
        return self.ffn(op, x)


class Kosmos2TextModel(XGLMModel):
    """XGLM's backbone with Kosmos-2's blocks and position rows."""

    def __init__(self, config: Kosmos2TextConfig) -> None:
        super().__init__(config)
        self.layers = nn.ModuleList(  # in place of XGLM's blocks
            [Kosmos2TextBlock(config) for _ in range(config.num_hidden_layers)]
        )

    def make_positions(self, config: Kosmos2TextConfig):
        # transformers' table: max_position_embeddings + 2 rows, the padding row zero
        rows = config.max_position_embeddings + 2
        if config.pad_token_id >= rows:
            raise ConfigError(f"kosmos-2 pad_token_id {config.pad_token_id} is past the table")
        table = tensor2tensor_sinusoids(rows, config.hidden_size, config.pad_token_id)
        return FixedPositions(table)


class Kosmos2TextForCausalLM(XGLMForCausalLM):
    """``model`` and the (tied) ``lm_head``: transformers' ``Kosmos2TextForCausalLM``."""

    config_class = Kosmos2TextConfig
    model_class = Kosmos2TextModel
