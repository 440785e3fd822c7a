"""Parts shared by the GPT-2 lineage: Conv1D, the LM head, absolute positions,
a self-attention base with per-family projections, and the decoder skeleton.

These families name every submodule differently (``transformer.h.0.attn.c_attn``,
``model.decoder.layers.0.self_attn.q_proj``, ``gpt_neox.layers.0.attention.query_key_value``...),
so the skeleton reads its parts by name (:attr:`GPTBackbone.layers_name`,
:attr:`GPTForCausalLM.backbone_name`...) and each family declares those names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    TiedLMHead,
    attention_bias,
    get_activation,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from mobius.config import ArchitectureConfig
from mobius.model import Model


class Conv1D(nn.Module):
    """GPT-2's ``Conv1D``: a linear layer whose checkpoint weight is already ``[in, out]``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter([in_features, out_features])
        self.bias = nn.Parameter([out_features]) if bias else None

    def forward(self, op, x: ir.Value) -> ir.Value:
        y = op.MatMul(x, self.weight)
        return op.Add(y, self.bias) if self.bias is not None else y


def make_lm_head(embedding: Embedding, tied: bool, hidden_size: int, bias: bool = False):
    """The output projection: tied to ``embedding`` or its own ``weight [vocab, hidden]``.

    A tied head may still own a ``bias [vocab]`` (CTRL, tied GPT-J).
    """
    if tied:
        return TiedLMHead(embedding, bias)
    return Linear(hidden_size, embedding.weight.shape[0], bias)


class ScaledEmbedding(Embedding):
    """Token embeddings multiplied by a constant (``sqrt(hidden)`` in BioGPT, XGLM, CTRL)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, scale: float = 1.0) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self.scale = scale

    def forward(self, op, ids: ir.Value) -> ir.Value:
        x = super().forward(op, ids)
        return op.Mul(x, self.scale) if self.scale != 1.0 else x


class OffsetEmbedding(Embedding):
    """Learned positions stored ``offset`` rows down the table (OPT and BioGPT keep 2 spare rows)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, offset: int = 0) -> None:
        super().__init__(num_embeddings + offset, embedding_dim)
        self.offset = offset

    def forward(self, op, position_ids: ir.Value) -> ir.Value:
        if self.offset:
            position_ids = op.Add(position_ids, op.Constant(value_int=self.offset))
        return super().forward(op, position_ids)


class FixedPositions(nn.Module):
    """A position table computed at build time (sinusoids) and looked up by ``position_ids``."""

    def __init__(self, table: np.ndarray, offset: int = 0) -> None:
        super().__init__()
        self.table = np.ascontiguousarray(table, dtype=np.float32)
        self.offset = offset

    def forward(self, op, position_ids: ir.Value, like: ir.Value) -> ir.Value:
        table = op.CastLike(op.Constant(value=ir.tensor(self.table)), like)
        if self.offset:
            position_ids = op.Add(position_ids, op.Constant(value_int=self.offset))
        return op.Gather(table, position_ids, axis=0)  # [batch, seq, hidden]


class SelfAttention(nn.Module):
    """Causal self-attention over a KV cache; families add their projections.

    A subclass creates its projection modules (named as in its checkpoint) and implements
    :meth:`project_qkv` (``x [batch, seq, hidden]`` → q, k, v ``[batch, heads, seq, head_dim]``)
    and :meth:`project_out`. :meth:`rotate` applies rotary embeddings where a family has them.
    """

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale = scale

    def split_heads(self, op, x: ir.Value) -> ir.Value:
        """``[batch, seq, heads*head_dim]`` → ``[batch, heads, seq, head_dim]``."""
        return split_heads(op, x, head_dim=self.head_dim)

    def split_fused_heads(self, op, qkv: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """A per-head fused projection ``[batch, seq, heads*(q|k|v)]`` → q, k, v per head.

        GPT-NeoX and multi-head GPT-BigCode lay each head's query, key and value side by side.
        """
        qkv = split_heads(op, qkv, self.num_heads, 3 * self.head_dim)
        q, k, v = op.Split(qkv, num_outputs=3, axis=-1, _outputs=3)
        return q, k, v

    def project_qkv(self, op, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        raise NotImplementedError

    def project_out(self, op, y: ir.Value) -> ir.Value:
        raise NotImplementedError

    def rotate(self, op, q, k, position_embeddings):
        return q, k

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)
        if position_embeddings is not None:
            q, k = self.rotate(op, q, k, position_embeddings)
        y, present_key, present_value = scaled_dot_product_attention(
            op, q, k, v, bias, past_key, past_value,
            num_heads=self.num_heads, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
            scale=self.scale,
        )  # fmt: skip
        return self.project_out(op, merge_heads(op, y)), (present_key, present_value)


class QKVOutAttention(SelfAttention):
    """Separate ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj`` (GPT-Neo, GPT-J, OPT, BioGPT, XGLM)."""

    def __init__(
        self, hidden_size: int, num_heads: int, scale: float, bias: bool, out_bias: bool
    ) -> None:
        head_dim = hidden_size // num_heads
        super().__init__(num_heads, num_heads, head_dim, scale)
        self.q_proj = Linear(hidden_size, hidden_size, bias)
        self.k_proj = Linear(hidden_size, hidden_size, bias)
        self.v_proj = Linear(hidden_size, hidden_size, bias)
        self.out_proj = Linear(hidden_size, hidden_size, out_bias)

    def project_qkv(self, op, x):
        return (
            self.split_heads(op, self.q_proj(op, x)),
            self.split_heads(op, self.k_proj(op, x)),
            self.split_heads(op, self.v_proj(op, x)),
        )

    def project_out(self, op, y):
        return self.out_proj(op, y)


class PreNormDecoderLayer(nn.Module):
    """The fairseq decoder layer of OPT, BioGPT and XGLM (their checkpoint names), pre-norm:
    ``x + self_attn(self_attn_layer_norm(x))`` then ``x + fc2(act(fc1(final_layer_norm(x))))``.
    """

    def __init__(self, self_attn, hidden: int, ffn_dim: int, act: str, bias: bool, norm) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.self_attn_layer_norm = norm()
        self.fc1 = Linear(hidden, ffn_dim, bias)
        self.fc2 = Linear(ffn_dim, hidden, bias)
        self.final_layer_norm = norm()
        self.act = get_activation(act)

    def feed_forward(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, x)))

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.self_attn_layer_norm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, h)
        return op.Add(x, self.feed_forward(op, self.final_layer_norm(op, x))), present


class GPTBackbone(nn.Module):
    """Embeddings, blocks and the final norm, with the family's own submodule names.

    A subclass creates its modules, sets :attr:`layers_name` and :attr:`norm_name` to the
    attributes holding the blocks and the final norm (``norm_name = None``: no final norm),
    and implements :meth:`embed`. Each block is called as
    ``block(op, x, position_embeddings, bias, past_key, past_value) -> (x, (key, value))``.
    """

    layers_name = "h"
    norm_name: str | None = "ln_f"

    def __init__(self, config: ArchitectureConfig) -> None:
        super().__init__()
        self.config = config

    def embed(self, op, input_ids: ir.Value, position_ids: ir.Value) -> ir.Value:
        raise NotImplementedError

    def position_embeddings(self, op, position_ids: ir.Value):
        """Rotary ``(cos, sin)`` for the blocks; ``None`` for absolute positions."""
        return None

    def sliding_window(self, layer_idx: int) -> int | None:
        if self.config.layer_types[layer_idx] == "sliding_attention":
            return self.config.sliding_window
        return None

    def finish(self, op, x: ir.Value) -> ir.Value:
        """After the final norm (OPT projects back to its embedding width here)."""
        return x

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        x = self.embed(op, input_ids, position_ids)  # [batch, seq, hidden]
        rope = self.position_embeddings(op, position_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        layers = getattr(self, self.layers_name)
        windows = [self.sliding_window(i) for i in range(len(layers))]
        biases = {
            window: attention_bias(op, attention_mask, seq_len, x.dtype, window)
            for window in set(windows)
        }
        presents = []
        for layer, window, (past_key, past_value) in zip(
            layers, windows, past_key_values, strict=True
        ):
            x, present = layer(op, x, rope, biases[window], past_key, past_value)
            presents.append(present)
        if self.norm_name is not None:
            x = getattr(self, self.norm_name)(op, x)
        return self.finish(op, x), presents


# fairseq's decoders (BioGPT, XGLM) build every LayerNorm with nn.LayerNorm's default epsilon;
# their configs' layer_norm_eps, where they have one, is never read by transformers.
FAIRSEQ_LAYER_NORM_EPS = 1e-5


@dataclass
class FairseqDecoderConfig(ArchitectureConfig):
    """A fairseq decoder's fields: multi-head attention, no RoPE or windows, and embeddings
    scaled by ``sqrt(hidden)`` when ``scale_embedding``."""

    scale_embedding: bool = True

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        heads = fields["num_attention_heads"]
        fields.update(
            num_key_value_heads=heads,
            head_dim=fields["hidden_size"] // heads,
            rms_norm_eps=FAIRSEQ_LAYER_NORM_EPS,
            rope=None,
            sliding_window=None,
            layer_types=[],
            scale_embedding=bool(hf_config.scale_embedding),
        )
        return fields


class FairseqPreNormDecoder(GPTBackbone):
    """BioGPT's and XGLM's backbone: scaled ``embed_tokens``, the family's ``embed_positions``
    (:meth:`make_positions`, added in :meth:`embed`), pre-norm ``layers`` and ``layer_norm``."""

    layers_name = "layers"
    norm_name = "layer_norm"

    def __init__(self, config: FairseqDecoderConfig) -> None:
        super().__init__(config)
        hidden = config.hidden_size
        scale = math.sqrt(hidden) if config.scale_embedding else 1.0
        self.embed_tokens = ScaledEmbedding(config.vocab_size, hidden, scale)
        self.embed_positions = self.make_positions(config)
        self.layers = nn.ModuleList(
            [
                PreNormDecoderLayer(
                    QKVOutAttention(
                        hidden, config.num_attention_heads, config.head_dim**-0.5, True, True
                    ),
                    hidden,
                    config.intermediate_size,
                    config.hidden_act,
                    bias=True,
                    norm=lambda: LayerNorm(hidden, config.rms_norm_eps),
                )
                for _ in range(config.num_hidden_layers)
            ]
        )
        self.layer_norm = LayerNorm(hidden, config.rms_norm_eps)

    def make_positions(self, config: FairseqDecoderConfig) -> nn.Module:
        raise NotImplementedError


class GPTForCausalLM(Model):
    """A backbone and its output head, under the checkpoint's names.

    Subclasses set ``config_class``, ``model_class``, ``backbone_name`` (``"transformer"``,
    ``"model"``, ``"gpt_neox"``...) and ``head_name``, and may override :meth:`make_head`.
    """

    config_class = ArchitectureConfig
    model_class = GPTBackbone
    backbone_name = "transformer"
    head_name = "lm_head"
    head_bias = False

    def __init__(self, config: ArchitectureConfig) -> None:
        super().__init__()
        self.config = config
        setattr(self, self.backbone_name, self.model_class(config))
        setattr(self, self.head_name, self.make_head(config))

    @property
    def backbone(self) -> GPTBackbone:
        return getattr(self, self.backbone_name)

    def input_embedding(self) -> Embedding:
        return self.backbone.wte

    def make_head(self, config):
        return make_lm_head(
            self.input_embedding(), config.tie_word_embeddings, config.hidden_size, self.head_bias
        )

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        """Per layer: (kv_heads, key head_dim, value head_dim)."""
        c = self.config
        return [(c.num_key_value_heads, c.head_dim, c.head_dim)] * c.num_hidden_layers

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        hidden, presents = self.backbone(
            op, input_ids, attention_mask, position_ids, past_key_values
        )
        return getattr(self, self.head_name)(op, hidden), presents

    def sanitize(self, weights: dict) -> dict:
        """Checkpoints saved from the bare model (GPT-2's and OPT's own) lack the backbone
        prefix; a tied checkpoint may still carry a copy of the head weight (the embedding)."""
        prefix, head = f"{self.backbone_name}.", f"{self.head_name}."
        if not any(name.startswith(prefix) for name in weights):
            weights = {
                name if name.startswith(head) else prefix + name: tensor
                for name, tensor in weights.items()
            }
        if self.config.tie_word_embeddings:
            weights.pop(f"{head}weight", None)
        return weights
