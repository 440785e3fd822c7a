"""Dory: an nGPT decoder (hidden states on the unit sphere) with recurrent middle layers.

What differs from Llama:

- every norm is a weightless L2 projection ``x / sqrt(sum(x²) + eps)``; queries and
  keys are projected per head, and so are the attention output (before ``o_proj``,
  ``attn_sub_norm``) and the MLP's inner activation (``ffn_sub_norm``);
- queries are scaled per channel by ``(sqk * sqrt(head_dim) / init)²`` after RoPE; the
  attention output is gated by ``sigmoid(g_proj(x) * (s_gate * hidden**0.25 / init)²)``;
  the MLP's gate and up projections are scaled by ``suv_* * sqrt(hidden)``;
- the residual interpolates towards the normalised update at a learned rate,
  ``h + |lambda * alpha / init| * (norm(update) - h)``, with ``h = norm(x)``;
- the ``n_recurrent_layers`` after the ``n_input_layers`` run ``n_recurrent_loops``
  times, each loop starting from ``norm(h) + norm(h_input)``; in the default
  ``per_loop`` cache mode every extra loop has its own caches, appended after the
  layers' own (``num_hidden_layers + n_recurrent_layers * (loops - 1)`` caches);
- the logits are scaled per token by ``logit_scale / init``.

``init`` is ``initializer_range`` and ``alpha`` ``ngpt_alpha_init`` (constants of the
parametrisation). Checkpoint names: ``backbone.embeddings``, ``self_attn.g_proj``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Attention,
    Embedding,
    Linear,
    get_activation,
    merge_heads,
)
from mobius.config import ArchitectureConfig, RopeConfig
from mobius_text.models._rope_by_type import RotaryByLayerType, rope_by_layer_type_fields
from mobius_text.models.llama import LlamaForCausalLM


@dataclass
class DoryConfig(ArchitectureConfig):
    """Llama fields plus RoPE per layer type, nGPT constants and the recurrent layout."""

    rope_by_layer_type: dict[str, RopeConfig] = field(default_factory=dict)
    initializer_range: float = 0.02
    ngpt_alpha_init: float = 0.05
    n_input_layers: int = 0
    n_recurrent_layers: int = 0
    n_output_layers: int = 0
    n_recurrent_loops: int = 1

    @classmethod
    def hf_fields(cls, hf_config):
        if hf_config.recurrent_kv_cache_mode != "per_loop":
            raise NotImplementedError(
                "Dory: only the per_loop recurrent KV-cache mode is supported"
            )
        fields = super().hf_fields(hf_config)
        fields.update(
            **rope_by_layer_type_fields(hf_config, fields["layer_types"]),
            initializer_range=float(hf_config.initializer_range),
            ngpt_alpha_init=float(hf_config.ngpt_alpha_init),
            n_input_layers=hf_config.n_input_layers,
            n_recurrent_layers=hf_config.n_recurrent_layers,
            n_output_layers=hf_config.n_output_layers,
            n_recurrent_loops=hf_config.n_recurrent_loops,
        )
        return fields

    @property
    def num_cache_slots(self) -> int:
        return self.num_hidden_layers + self.n_recurrent_layers * (self.n_recurrent_loops - 1)


# A block of the released two-blocks-per-layer layout (see DoryForCausalLM.sanitize).
RELEASED_BLOCK = re.compile(r"layers\.(\d+)\.(mixer|attn_alpha|mlp_alpha)(?=\.|$)")
L2_EPS = 1e-6  # Llama4TextL2Norm's default, which Dory's norms keep


def l2_norm(op, x: ir.Value) -> ir.Value:
    """``x / sqrt(sum(x²) + eps)`` over the last axis: onto the unit sphere."""
    sum_sq = op.ReduceSum(op.Mul(x, x), op.Constant(value_ints=[-1]), keepdims=1)
    return op.Div(x, op.Sqrt(op.Add(sum_sq, L2_EPS)))


class DoryAttention(Attention):
    """Unit-norm q/k, per-channel query scales, a scaled sigmoid gate and a normalised output."""

    def __init__(self, config: DoryConfig) -> None:
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
        )
        width, init = config.num_attention_heads * config.head_dim, config.initializer_range
        self.g_proj = Linear(config.hidden_size, width)
        self.sqk = nn.Parameter([width])
        self.s_gate = nn.Parameter([width])
        self.sqk_scale = config.head_dim**0.5 / init
        self.s_gate_scale = config.hidden_size**0.25 / init

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        q, k = l2_norm(op, q), l2_norm(op, k)
        cos, sin = (op.CastLike(t, q) for t in position_embeddings)
        q = op.RotaryEmbedding(q, cos, sin, interleaved=0)
        k = op.RotaryEmbedding(k, cos, sin, interleaved=0)
        query_scale = op.Reshape(
            op.Mul(self.sqk, self.sqk_scale), op.Constant(value_ints=[-1, 1, self.head_dim])
        )  # [heads, 1, head_dim]
        q = op.Mul(q, op.Mul(query_scale, query_scale))
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = merge_heads(op, y)
        gate_scale = op.Mul(self.s_gate, self.s_gate_scale)
        y = op.Mul(y, op.Sigmoid(op.Mul(self.g_proj(op, x), op.Mul(gate_scale, gate_scale))))
        return self.o_proj(op, l2_norm(op, y)), (present_key, present_value)


class DoryMLP(nn.Module):
    """``down(norm(act(gate(x) * s_gate) * up(x) * s_up))`` with ``s = suv * sqrt(hidden)``."""

    def __init__(self, config: DoryConfig) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        self.gate_proj = Linear(hidden, inter, config.mlp_bias)
        self.up_proj = Linear(hidden, inter, config.mlp_bias)
        self.down_proj = Linear(inter, hidden, config.mlp_bias)
        self.suv_gate = nn.Parameter([inter])
        self.suv_up = nn.Parameter([inter])
        self.suv_scale, self.act = hidden**0.5, get_activation(config.hidden_act)

    def forward(self, op, x: ir.Value) -> ir.Value:
        gate = op.Mul(self.gate_proj(op, x), op.Mul(self.suv_gate, self.suv_scale))
        up = op.Mul(self.up_proj(op, x), op.Mul(self.suv_up, self.suv_scale))
        return self.down_proj(op, l2_norm(op, op.Mul(self.act(op, gate), up)))


class DoryDecoderLayer(nn.Module):
    """``h = norm(x)``; ``h += |rate| * (norm(block(h)) - h)`` for attention, then the MLP."""

    def __init__(self, config: DoryConfig) -> None:
        super().__init__()
        self.self_attn = DoryAttention(config)
        self.mlp = DoryMLP(config)
        self.lambda_1 = nn.Parameter([config.hidden_size])
        self.lambda_2 = nn.Parameter([config.hidden_size])
        self.lambda_scale = config.ngpt_alpha_init / config.initializer_range

    def towards(self, op, h: ir.Value, update: ir.Value, rate: ir.Value) -> ir.Value:
        rate = op.Abs(op.Mul(rate, self.lambda_scale))
        return op.Add(h, op.Mul(rate, op.Sub(l2_norm(op, update), h)))

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h = l2_norm(op, x)
        a, present = self.self_attn(op, h, position_embeddings, bias, past_key, past_value)
        h = l2_norm(op, self.towards(op, h, a, self.lambda_1))
        return self.towards(op, h, self.mlp(op, h), self.lambda_2), present


class DoryModel(RotaryByLayerType, nn.Module):
    """HF ``backbone``: input layers, the recurrent layers' loops, output layers."""

    def __init__(self, config: DoryConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [DoryDecoderLayer(config) for _ in range(config.num_hidden_layers)]
        )
        self.make_rotary_by_layer_type(config)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        c = self.config
        x = self.embeddings(op, input_ids)  # [batch, seq, hidden]
        rope, bias = self.ropes_and_biases(op, input_ids, attention_mask, position_ids, x.dtype)
        presents = [None] * c.num_cache_slots

        def run(x, layer_idx, slot):
            kind = c.layer_types[layer_idx]
            x, presents[slot] = self.layers[layer_idx](
                op, x, rope[kind], bias[kind], *past_key_values[slot]
            )
            return x

        start, count = c.n_input_layers, c.n_recurrent_layers
        for i in range(start):
            x = run(x, i, i)
        loop_input = l2_norm(op, x)
        for loop in range(c.n_recurrent_loops):
            x = op.Add(l2_norm(op, x), loop_input)
            # Loop 0 uses the layers' own caches; later loops have theirs after all of those.
            offset = 0 if loop == 0 else c.num_hidden_layers - start + (loop - 1) * count
            for i in range(start, start + count):
                x = run(x, i, i + offset)
        for i in range(c.num_hidden_layers - c.n_output_layers, c.num_hidden_layers):
            x = run(x, i, i)
        return l2_norm(op, x), presents


class DoryForCausalLM(LlamaForCausalLM):
    """Dory causal LM: ``backbone`` plus an ``lm_head`` with per-token logit scales."""

    config_class = DoryConfig
    model_class = DoryModel
    backbone_name = "backbone"

    def make_head(self, config: DoryConfig):
        return DoryLMHead(config)

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        c = self.config
        return [(c.num_key_value_heads, c.head_dim, c.head_dim)] * c.num_cache_slots

    def sanitize(self, weights: dict) -> dict:
        """Released checkpoints store layer ``i`` as two blocks, ``layers.{2i}.mixer`` (attention,
        rate ``attn_alpha``) and ``layers.{2i+1}.mixer`` (MLP, rate ``mlp_alpha``); transformers
        (and its ``save_pretrained``) use ``layers.{i}.self_attn`` / ``mlp`` / ``lambda_1`` / ``lambda_2``.
        A bare ``DoryModel`` saved by transformers keeps its own ``embed_tokens`` (the rename
        back to ``embeddings`` is anchored on the causal LM's prefix): both are accepted."""
        bare = f"{self.backbone_name}.embed_tokens."
        for name in list(weights):
            if name.startswith(bare):
                renamed = f"{self.backbone_name}.embeddings.{name.removeprefix(bare)}"
                weights[renamed] = weights.pop(name)
                continue
            if (match := RELEASED_BLOCK.search(name)) is None:
                continue
            index, part = int(match[1]), match[2]
            part = {"attn_alpha": "lambda_1", "mlp_alpha": "lambda_2"}.get(
                part, ("self_attn", "mlp")[index % 2]
            )
            renamed = f"{name[: match.start()]}layers.{index // 2}.{part}{name[match.end() :]}"
            weights[renamed] = weights.pop(name)
        return weights  # the head is never tied: nothing of Llama's to drop


class DoryLMHead(Linear):
    """``lm_head`` whose logits are scaled per token by ``logit_scale / initializer_range``."""

    def __init__(self, config: DoryConfig) -> None:
        super().__init__(config.hidden_size, config.vocab_size)
        self.logit_scale = nn.Parameter([config.vocab_size])
        self.logit_scale_factor = 1.0 / config.initializer_range

    def forward(self, op, x: ir.Value) -> ir.Value:
        return op.Mul(super().forward(op, x), op.Mul(self.logit_scale, self.logit_scale_factor))


MODEL_TYPES = {"dory": DoryForCausalLM}
