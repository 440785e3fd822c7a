"""The causal-LM contract (ORT, ORT GenAI and Optimum read these names).

Inputs: ``input_ids`` int64 [batch, sequence], ``attention_mask`` int64
[batch, total_sequence], ``position_ids`` int64 [batch, sequence] and, per layer,
its cache tensors ``past_key_values.{i}.<kind>``. Outputs: ``logits``
[batch, sequence, vocab] and ``present.{i}.<kind>``.

Attention layers cache ``key`` and ``value`` [batch, kv_heads, past_sequence,
head_dim]; the present ones span ``total_sequence``. State-space layers cache
fixed-size states instead (``conv_state``, ``ssm_state``): their present
tensors have the same shape as the past ones. A module describes its cache with
``cache_layout()`` (or, for attention-only models, ``kv_cache_shapes()``).
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.components._lora import declare_lora_inputs
from mobius.tasks._base import IR_VERSION, ModelTask, set_output

INT64 = ir.DataType.INT64

# Per layer: the (kind, shape) of each cache tensor, shapes in symbolic dims and ints.
CacheLayout = list[list[tuple[str, list]]]


def cache_layout(module) -> CacheLayout:
    """The module's cache layout (:meth:`mobius.model.Model.cache_layout`)."""
    return module.cache_layout()


def present_shape(shape: list) -> list:
    """A past cache tensor's shape with ``past_sequence`` grown to ``total_sequence``."""
    return ["total_sequence" if dim == "past_sequence" else dim for dim in shape]


class CausalLMTask(ModelTask):
    """Text generation with a cache; the module returns ``(logits, [per-layer present tuple])``."""

    name = "causal-lm"
    genai = True

    def genai_config(self, package) -> dict:
        from mobius.genai import genai_config

        return genai_config(package, ep=self.ep)

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("causal_lm")
        input_ids = builder.input("input_ids", INT64, ["batch", "sequence"])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "total_sequence"])
        position_ids = builder.input("position_ids", INT64, ["batch", "sequence"])
        layout = cache_layout(module)
        past = [
            tuple(
                builder.input(f"past_key_values.{i}.{kind}", dtype, shape) for kind, shape in layer
            )
            for i, layer in enumerate(layout)
        ]

        logits, present = module(builder.op, input_ids, attention_mask, position_ids, past)

        set_output(builder, logits, "logits", dtype, ["batch", "sequence", config.vocab_size])
        for i, (values, layer) in enumerate(zip(present, layout, strict=True)):
            for value, (kind, shape) in zip(values, layer, strict=True):
                set_output(builder, value, f"present.{i}.{kind}", dtype, present_shape(shape))
        declare_lora_inputs(graph)  # --adapter-inputs: after the contract's inputs
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
