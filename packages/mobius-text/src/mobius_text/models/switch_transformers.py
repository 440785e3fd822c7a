"""Switch Transformers: T5 whose feed-forward is, every few blocks, a top-1 mixture of experts.

Block ``i`` of a stack is sparse when ``i % step == 1`` (or ``step == 1``), with
``step = encoder_sparse_step`` / ``decoder_sparse_step`` (0: no sparse block).
The sparse ``mlp`` routes each token to the argmax of ``softmax(router(x))`` and
scales that expert's output by the chosen probability. An expert takes at most
``expert_capacity`` tokens of each sequence, counted in sequence order within
one call (a decoder step counts only its own tokens); later tokens are dropped
and the block passes them through on the residual alone. The router runs in
``router_dtype`` (float32) whatever the activation dtype, as transformers does.
Dense blocks name their feed-forward ``mlp`` (T5: ``DenseReluDense``). The head is
tied to ``shared`` and rescales the decoder output by ``d_model**-0.5``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import ACTIVATIONS, RMSNorm, TransposedParameter
from mobius.components.moe import dispatch_experts, flatten_tokens, unflatten_tokens
from mobius.errors import ConfigError
from mobius_text.models.t5 import (
    T5Block,
    T5Config,
    T5DenseReluDense,
    T5ForConditionalGeneration,
    T5LayerCrossAttention,
    T5LayerSelfAttention,
    T5Stack,
)

FLOAT = ir.DataType.FLOAT


@dataclass
class SwitchTransformersConfig(T5Config):
    num_experts: int = 8
    expert_capacity: int = 64
    router_bias: bool = False
    encoder_sparse_step: int = 0
    decoder_sparse_step: int = 0

    @classmethod
    def from_hf(cls, hf: Any) -> SwitchTransformersConfig:
        if hf.router_dtype != "float32":
            raise ConfigError(f"router_dtype {hf.router_dtype!r} is not built; only 'float32'")
        if hf.dense_act_fn not in ACTIVATIONS:  # the experts are never gated
            raise ConfigError(f"dense_act_fn {hf.dense_act_fn!r} is not a supported activation")
        if not hf.tie_word_embeddings:  # transformers 5 then embeds with each stack's embed_tokens
            raise ConfigError(
                "tie_word_embeddings=False (untied per-stack embeddings) is not built"
            )
        return dataclasses.replace(
            super().from_hf(hf),
            scale_decoder_outputs=True,  # the head is tied
            num_experts=hf.num_experts,
            expert_capacity=hf.expert_capacity,
            router_bias=hf.router_bias,
            encoder_sparse_step=hf.encoder_sparse_step,
            decoder_sparse_step=hf.decoder_sparse_step,
        )


class RouterClassifier(nn.Module):
    """The router's linear layer, applied in float32 to a float32 input (``router_dtype``)."""

    def __init__(self, hidden_size: int, num_experts: int, bias: bool) -> None:
        super().__init__()
        self.weight = TransposedParameter(num_experts, hidden_size)
        self.bias = nn.Parameter([num_experts]) if bias else None

    def forward(self, op, x):
        y = op.MatMul(op.Cast(x, to=FLOAT), op.Cast(self.weight, to=FLOAT))
        return op.Add(y, op.Cast(self.bias, to=FLOAT)) if self.bias is not None else y


class SwitchTransformersTop1Router(nn.Module):
    def __init__(self, config: SwitchTransformersConfig) -> None:
        super().__init__()
        self.classifier = RouterClassifier(
            config.hidden_size, config.num_experts, config.router_bias
        )
        self.num_experts, self.expert_capacity = config.num_experts, config.expert_capacity

    def forward(self, op, x):
        """Dense routing weights ``[batch, seq, experts]``: the top probability where kept, else 0."""
        probs = op.CastLike(op.Softmax(self.classifier(op, x), axis=-1), x)
        choice = op.ArgMax(probs, axis=-1, keepdims=1)  # [batch, seq, 1], first of ties
        experts = op.Constant(value=ir.tensor(list(range(self.num_experts)), ir.DataType.INT64))
        chosen = op.Equal(choice, experts)  # the one-hot [batch, seq, experts]
        priority = op.CumSum(op.Cast(chosen, to=ir.DataType.INT64), op.Constant(value_int=1))
        capacity = op.Constant(value_int=self.expert_capacity)
        kept = op.And(chosen, op.LessOrEqual(priority, capacity))  # overflowing tokens dropped
        top = op.ReduceMax(probs, op.Constant(value_ints=[-1]), keepdims=1)
        return op.Where(kept, top, op.CastLike(op.Constant(value_float=0.0), x))


class SwitchTransformersExperts(nn.Module):
    """``expert_{e}``: one ``wi``/``wo`` MLP each, run on the tokens routed to it."""

    def __init__(self, config: SwitchTransformersConfig) -> None:
        super().__init__()
        for e in range(config.num_experts):
            setattr(self, f"expert_{e}", T5DenseReluDense(config))
        self.num_experts = config.num_experts

    def forward(self, op, x, routing):
        experts = [getattr(self, f"expert_{e}") for e in range(self.num_experts)]
        return dispatch_experts(op, x, routing, experts)


class SwitchTransformersSparseMLP(nn.Module):
    def __init__(self, config: SwitchTransformersConfig) -> None:
        super().__init__()
        self.router = SwitchTransformersTop1Router(config)
        self.experts = SwitchTransformersExperts(config)
        self.hidden_size, self.num_experts = config.hidden_size, config.num_experts

    def forward(self, op, x):
        routing = self.router(op, x)  # capacity counts along each sequence: route before flattening
        flat = op.Reshape(routing, op.Constant(value_ints=[-1, self.num_experts]))
        y = self.experts(op, flatten_tokens(op, x, self.hidden_size), flat)
        return unflatten_tokens(op, y, x)


class SwitchTransformersLayerFF(nn.Module):
    def __init__(self, config: SwitchTransformersConfig, is_sparse: bool) -> None:
        super().__init__()
        self.mlp = SwitchTransformersSparseMLP(config) if is_sparse else T5DenseReluDense(config)
        self.layer_norm = RMSNorm(config.hidden_size, config.eps)

    def forward(self, op, x):
        return op.Add(x, self.mlp(op, self.layer_norm(op, x)))


class SwitchTransformersBlock(T5Block):
    """T5's block with the ``mlp`` feed-forward, sparse or dense."""

    def __init__(self, config, is_decoder: bool, relative_bias: bool, is_sparse: bool) -> None:
        nn.Module.__init__(self)
        layers = [T5LayerSelfAttention(config, relative_bias)]
        layers += [T5LayerCrossAttention(config)] if is_decoder else []
        self.layer = nn.ModuleList([*layers, SwitchTransformersLayerFF(config, is_sparse)])


class SwitchTransformersStack(T5Stack):
    def make_block(self, config, is_decoder: bool, index: int) -> T5Block:
        step = config.decoder_sparse_step if is_decoder else config.encoder_sparse_step
        is_sparse = step > 0 and (index % step == 1 or step == 1)
        return SwitchTransformersBlock(config, is_decoder, index == 0, is_sparse)


class SwitchTransformersForConditionalGeneration(T5ForConditionalGeneration):
    config_class = SwitchTransformersConfig
    stack_class = SwitchTransformersStack
    ignored = ()  # no cross-attention position table


MODEL_TYPES = {"switch_transformers": SwitchTransformersForConditionalGeneration}
