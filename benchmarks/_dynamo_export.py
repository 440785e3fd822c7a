"""torch.onnx (dynamo) export of a HF causal LM with its KV cache, in mobius's I/O names.

Runs in the ``dynamo`` peer environment (see ``_peers.PEER_ENVS``), as a build:

    python _dynamo_export.py CHECKPOINT_DIR OUTPUT_DIR

Inputs ``input_ids``, ``attention_mask``, ``position_ids``,
``past_key_values.{i}.key/value``; outputs ``logits``, ``present.{i}.key/value``.
fp32, weights in ``model.onnx.data``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, DynamicCache


class WithCache(torch.nn.Module):
    """Takes and returns the KV cache as flat tensors, which torch.export can trace."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, past):
        cache = DynamicCache(config=self.model.config)
        for layer, (key, value) in enumerate(past):
            cache.update(key, value, layer)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
        )
        return out.logits, [(layer.keys, layer.values) for layer in out.past_key_values.layers]


def main(source: str, output: str) -> None:
    """Export ``source`` to ``output/model.onnx``."""
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=torch.float32, attn_implementation="sdpa", trust_remote_code=False
    ).eval()
    config = model.config
    layers, heads = config.num_hidden_layers, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    # Sample sizes other than 0 and 1, so that torch.export keeps the axes symbolic.
    seq, past_len = 3, 5
    past = [
        (torch.zeros(1, heads, past_len, head_dim), torch.zeros(1, heads, past_len, head_dim))
        for _ in range(layers)
    ]
    args = (
        torch.ones(1, seq, dtype=torch.int64),
        torch.ones(1, past_len + seq, dtype=torch.int64),
        torch.arange(past_len, past_len + seq)[None],
        past,
    )
    dyn = torch.export.Dim.DYNAMIC
    kv = {0: dyn, 2: dyn}
    dynamic_shapes = ({0: dyn, 1: dyn}, {0: dyn, 1: dyn}, {0: dyn, 1: dyn}, [(kv, kv)] * layers)
    names = [f"past_key_values.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    outputs = ["logits"] + [n.replace("past_key_values", "present") for n in names]
    out = Path(output)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with torch.inference_mode(False), torch.no_grad():
        program = torch.onnx.export(
            WithCache(model),
            args,
            dynamo=True,
            dynamic_shapes=dynamic_shapes,
            input_names=["input_ids", "attention_mask", "position_ids", *names],
            output_names=outputs,
            external_data=True,
        )
    program.save(str(out / "model.onnx"), external_data=True)
    config.save_pretrained(out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
