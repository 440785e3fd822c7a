"""The causal-LM contract (ORT, ORT GenAI and Optimum read these names).

Inputs: ``input_ids`` int64 [batch, sequence], ``attention_mask`` int64
[batch, total_sequence], ``position_ids`` int64 [batch, sequence] and per layer
``past_key_values.{i}.key`` / ``.value`` [batch, kv_heads, past_sequence, head_dim].
Outputs: ``logits`` [batch, sequence, vocab] and ``present.{i}.key`` / ``.value``
[batch, kv_heads, total_sequence, head_dim].
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks._base import IR_VERSION, ModelTask, new_graph, set_output

INT64 = ir.DataType.INT64


class CausalLMTask(ModelTask):
    """Text generation with a KV cache; the module returns ``(logits, [(key, value), ...])``."""

    name = "causal-lm"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = new_graph("causal_lm")
        input_ids = builder.input("input_ids", INT64, ["batch", "sequence"])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "total_sequence"])
        position_ids = builder.input("position_ids", INT64, ["batch", "sequence"])
        cache_shapes = module.kv_cache_shapes()
        past = []
        for i, (kv_heads, key_dim, value_dim) in enumerate(cache_shapes):
            key = builder.input(
                f"past_key_values.{i}.key", dtype, ["batch", kv_heads, "past_sequence", key_dim]
            )
            value = builder.input(
                f"past_key_values.{i}.value", dtype, ["batch", kv_heads, "past_sequence", value_dim]
            )
            past.append((key, value))

        logits, present = module(builder.op, input_ids, attention_mask, position_ids, past)

        set_output(builder, logits, "logits", dtype, ["batch", "sequence", config.vocab_size])
        for i, ((key, value), (kv_heads, key_dim, value_dim)) in enumerate(
            zip(present, cache_shapes, strict=True)
        ):
            shape = ["batch", kv_heads, "total_sequence"]
            set_output(builder, key, f"present.{i}.key", dtype, [*shape, key_dim])
            set_output(builder, value, f"present.{i}.value", dtype, [*shape, value_dim])
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
