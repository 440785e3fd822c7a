"""CLIP's text tower: learned positions, causal pre-norm layers, the end-of-text token pooled.

The module tree follows the original checkpoints (``text_model.embeddings...``,
``text_model.encoder.layers.N...``, ``text_model.final_layer_norm``,
``text_projection``); transformers 5 saves a bare ``CLIPTextModel`` without the
``text_model.`` prefix, which is added back. ``pooler_output`` is the final state
at the end-of-text token, chosen as transformers does: with the legacy
``eos_token_id == 2`` the largest id of each row (the end token is the last id of
CLIP's vocabulary), otherwise the first ``eos_token_id``. A
``CLIPTextModelWithProjection`` checkpoint gives ``text_embeds`` instead. Both
also give ``penultimate_hidden_state``, transformers' ``hidden_states[-2]``: the
state before the last layer, which SDXL's pipelines read from their text encoders, and
``last_layer_hidden_state``, ``hidden_states[-1]``: the last layer's output before the
final norm, which Stable Cascade's prior reads.

SigLIP's text tower reuses these layers (:class:`CLIPEncoder` takes any additive
bias, or none); dual encoders and diffusion pipelines reuse
:class:`CLIPTextTransformer`, whose :meth:`~CLIPTextTransformer.hidden_states`
are transformers' ``hidden_states``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    attention_bias,
    bidirectional_attention,
    get_activation,
    module_scope,
)
from mobius.config import EncoderConfig
from mobius.errors import ConfigError
from mobius.model import Model

#: ``--head`` values a text tower builds: the bare features, or them pooled by the task.
TEXT_TOWER_HEADS = ("none", "sentence-embedding")


@dataclass
class CLIPTextConfig(EncoderConfig):
    hidden_act: str = "quick_gelu"
    layer_norm_eps: float = 1e-5
    projection_dim: int = 512
    eos_token_id: int = 49407
    #: The checkpoint's architecture class names (``CLIPTextModelWithProjection``: a projection).
    architectures: tuple[str, ...] = ()

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        eos = getattr(hf_config, "eos_token_id", None)
        if isinstance(eos, bool) or not isinstance(eos, int):
            raise ConfigError(
                f"eos_token_id {eos!r}: CLIP pools the state at one end-of-text token id"
            )
        return dict(
            super().hf_fields(hf_config),
            projection_dim=int(getattr(hf_config, "projection_dim", None) or 0),
            eos_token_id=eos,
            architectures=tuple(getattr(hf_config, "architectures", None) or ()),
        )

    @property
    def with_projection(self) -> bool:
        return any(a.endswith("WithProjection") for a in self.architectures)


class CLIPAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.q_proj = Linear(hidden_size, hidden_size, bias=True)
        self.k_proj = Linear(hidden_size, hidden_size, bias=True)
        self.v_proj = Linear(hidden_size, hidden_size, bias=True)
        self.out_proj = Linear(hidden_size, hidden_size, bias=True)
        self.num_heads, self.scale = num_heads, (hidden_size // num_heads) ** -0.5

    def forward(self, op, x, bias):
        q, k, v = self.q_proj(op, x), self.k_proj(op, x), self.v_proj(op, x)
        y = bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)
        return self.out_proj(op, y)


class CLIPMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, act: str) -> None:
        super().__init__()
        self.fc1 = Linear(hidden_size, intermediate_size, bias=True)
        self.fc2 = Linear(intermediate_size, hidden_size, bias=True)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, x)))


class CLIPEncoderLayer(nn.Module):
    """Pre-norm: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, hidden: int, heads: int, intermediate: int, act: str, eps: float) -> None:
        super().__init__()
        self.layer_norm1 = LayerNorm(hidden, eps)
        self.self_attn = CLIPAttention(hidden, heads)
        self.layer_norm2 = LayerNorm(hidden, eps)
        self.mlp = CLIPMLP(hidden, intermediate, act)

    def forward(self, op, x, bias):
        x = op.Add(x, self.self_attn(op, self.layer_norm1(op, x), bias))
        return op.Add(x, self.mlp(op, self.layer_norm2(op, x)))


class CLIPEncoder(nn.Module):
    """The layers; the call returns every layer's output, as transformers reports them."""

    def __init__(
        self, layers: int, hidden: int, heads: int, intermediate: int, act: str, eps: float
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [CLIPEncoderLayer(hidden, heads, intermediate, act, eps) for _ in range(layers)]
        )

    def forward(self, op, x, bias, num_layers: int | None = None) -> list:
        """``[x, layer 0's output, ...]``, each ``[batch, seq, hidden]`` (the first ``num_layers``)."""
        states = [x]
        for layer in list(self.layers)[:num_layers]:
            states.append(layer(op, states[-1], bias))
        return states


def encoder_of(config) -> CLIPEncoder:
    """The :class:`CLIPEncoder` of a CLIP-like config (text or vision)."""
    return CLIPEncoder(
        config.num_hidden_layers,
        config.hidden_size,
        config.num_attention_heads,
        config.intermediate_size,
        config.hidden_act,
        config.layer_norm_eps,
    )


class CLIPTextEmbeddings(nn.Module):
    """``token_embedding(ids) + position_embedding(0..seq-1)``."""

    def __init__(self, config: CLIPTextConfig) -> None:
        super().__init__()
        self.token_embedding = Embedding(config.vocab_size, config.hidden_size)
        self.position_embedding = Embedding(config.max_position_embeddings, config.hidden_size)

    def forward(self, op, input_ids):
        seq_len = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        positions = op.Unsqueeze(op.Range(0, seq_len, 1), [0])  # [1, seq]
        x = self.token_embedding(op, input_ids)  # [batch, seq, hidden]
        return op.Add(x, self.position_embedding(op, positions))


def gather_rows(op, hidden, index):
    """``hidden[b, index[b]]``: ``[batch, hidden]`` from ``[batch, seq, hidden]`` and ``index [batch]``."""
    return op.GatherND(hidden, op.Unsqueeze(index, [1]), batch_dims=1)


class CLIPTextTransformer(nn.Module):
    """The tower at ``text_model``: embeddings, causal encoder, final norm, end-token pooling."""

    def __init__(self, config: CLIPTextConfig) -> None:
        super().__init__()
        self.embeddings = CLIPTextEmbeddings(config)
        self.encoder = encoder_of(config)
        self.final_layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.eos_token_id = getattr(config, "eos_token_id", None)  # SigLIP pools otherwise

    def bias(self, op, input_ids, attention_mask, dtype: ir.DataType):
        """Causal and padding ``[batch, 1, seq, seq]``; causal only where the graph has no mask."""
        if attention_mask is None:
            attention_mask = op.ConstantOfShape(
                op.Shape(input_ids), value=ir.tensor([1], dtype=ir.DataType.INT64)
            )
        seq_len = op.Shape(input_ids, start=1, end=2)
        return attention_bias(op, attention_mask, seq_len, dtype)

    def hidden_states(self, op, input_ids, attention_mask, num_layers: int | None = None) -> list:
        """transformers' ``hidden_states``: the embeddings, then each layer's output.

        ``num_layers`` stops after that many layers (a diffusion pipeline's "clip skip"
        reads an inner layer and need not run the rest).
        """
        x = self.embeddings(op, input_ids)
        bias = self.bias(op, input_ids, attention_mask, x.dtype)
        return self.encoder(op, x, bias, num_layers)

    def pool(self, op, hidden, input_ids):
        """The state at each row's end-of-text token, ``[batch, hidden]``."""
        ids = op.Cast(input_ids, to=ir.DataType.INT32)
        if self.eos_token_id != 2:  # the first end token (pads may be end tokens too)
            eos = op.Constant(value=ir.tensor(self.eos_token_id, dtype=ir.DataType.INT32))
            ids = op.Cast(op.Equal(ids, eos), to=ir.DataType.INT32)
        # Legacy configs (eos_token_id 2): the largest id, CLIP's end token. ArgMax takes
        # the first maximum, as torch does.
        return gather_rows(op, hidden, op.ArgMax(ids, axis=-1, keepdims=0))

    def encode(self, op, input_ids, attention_mask):
        """``(last_hidden_state, pooler_output, hidden_states)``."""
        states = self.hidden_states(op, input_ids, attention_mask)
        x = self.final_layer_norm(op, states[-1])
        return x, self.pool(op, x, input_ids), states

    def forward(self, op, input_ids, attention_mask):
        """``(last_hidden_state, pooler_output)``."""
        x, pooled, _ = self.encode(op, input_ids, attention_mask)
        return x, pooled


class CLIPTextModel(Model):
    """The text tower for feature extraction: ``last_hidden_state``, ``pooler_output``.

    ``penultimate_hidden_state`` is transformers' ``hidden_states[-2]`` (SDXL's
    conditioning).

    A checkpoint of a ``*WithProjection`` class (its weights have ``text_projection``)
    gives ``text_embeds``, the projected pooler output, in place of ``pooler_output``,
    as transformers' ``CLIPTextModelWithProjection`` does.
    """

    config_class = CLIPTextConfig
    task = "feature-extraction"
    uses_token_type_ids = False
    tower_class = CLIPTextTransformer

    def __init__(self, config: CLIPTextConfig) -> None:
        super().__init__()
        if config.head not in TEXT_TOWER_HEADS:
            raise ConfigError(
                f"--head {config.head} does not apply to {config.model_type}; choose "
                f"{' or '.join(TEXT_TOWER_HEADS)}"
            )
        self.config = config
        self.text_model = self.tower_class(config)
        self.text_projection = None
        if config.with_projection:
            self.text_projection = Linear(config.hidden_size, config.projection_dim)

    def output_shapes(self) -> dict[str, list]:
        """The outputs besides ``last_hidden_state``, with their shapes.

        ``pooler_output`` or ``text_embeds`` as transformers names them, and
        ``penultimate_hidden_state``: transformers' ``hidden_states[-2]``, the input of
        the last layer (no final norm), which SDXL's pipelines condition on; and
        ``last_layer_hidden_state``, ``hidden_states[-1]`` (its output, no final norm:
        Stable Cascade's prior conditions on it).
        """
        states = ["batch", "sequence", self.config.hidden_size]
        penultimate = {"penultimate_hidden_state": states, "last_layer_hidden_state": states}
        if self.text_projection is not None:
            return {"text_embeds": ["batch", self.config.projection_dim], **penultimate}
        return {"pooler_output": ["batch", self.pooled_size], **penultimate}

    @property
    def pooled_size(self) -> int:
        return self.config.hidden_size

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        with module_scope(op, self.text_model):  # the tower's own parameter names
            hidden, pooled, states = self.text_model.encode(op, input_ids, attention_mask)
        outputs = {
            "last_hidden_state": hidden,
            "penultimate_hidden_state": states[-2],
            "last_layer_hidden_state": states[-1],
        }
        if self.text_projection is not None:
            return {**outputs, "text_embeds": self.text_projection(op, pooled)}
        return {**outputs, "pooler_output": pooled}

    @property
    def ignored(self) -> tuple[str, ...]:
        """The position-id buffer older checkpoints saved; a projection this class has not."""
        ignored = ("text_model.embeddings.position_ids",)
        return ignored if self.config.with_projection else (*ignored, "text_projection.*")

    def sanitize(self, weights: dict) -> dict:
        """A checkpoint saved by transformers 5 lacks the ``text_model.`` prefix: it is added."""
        own = ("text_model.", "text_projection.")
        return {k if k.startswith(own) else f"text_model.{k}": v for k, v in weights.items()}


MODEL_TYPES = {"clip_text_model": CLIPTextModel}
