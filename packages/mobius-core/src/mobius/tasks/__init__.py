"""Tasks: the input/output contracts of the graphs mobius builds.

Core owns the causal-LM, seq2seq, feature-extraction and multimodal-decoder
contracts (the last a base: a domain names the task and lists its encoders); domain
packages register theirs (``registry.register_task``). :func:`get_task` finds
either by name.
"""

from mobius.tasks._base import IR_VERSION, OPSET, ModelTask, new_graph, set_output, twin_module
from mobius.tasks._causal_lm import INT64, CausalLMTask, cache_layout, present_shape
from mobius.tasks._feature_extraction import FeatureExtractionTask, encoder_head
from mobius.tasks._multimodal import EncoderGraph, MultimodalDecoderModel, MultimodalDecoderTask
from mobius.tasks._seq2seq import Seq2SeqTask


def get_task(name: str, ep: str = "default") -> ModelTask:
    """A task instance by its name (``"causal-lm"``), core's or a domain package's."""
    from mobius._registry import registry

    return registry.task(name, ep=ep)


__all__ = [
    "INT64",
    "IR_VERSION",
    "OPSET",
    "CausalLMTask",
    "EncoderGraph",
    "FeatureExtractionTask",
    "ModelTask",
    "MultimodalDecoderModel",
    "MultimodalDecoderTask",
    "Seq2SeqTask",
    "cache_layout",
    "encoder_head",
    "get_task",
    "new_graph",
    "present_shape",
    "set_output",
    "twin_module",
]
