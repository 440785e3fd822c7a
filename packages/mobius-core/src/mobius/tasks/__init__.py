"""Tasks: the input/output contracts of the graphs mobius builds."""

from mobius.tasks._audio_features import AudioFeatureExtractionTask
from mobius.tasks._base import OPSET, ModelTask
from mobius.tasks._causal_lm import CausalLMTask
from mobius.tasks._cross_attention_vl import CrossAttentionVisionLanguageTask
from mobius.tasks._diffusion import (
    AdapterTask,
    ControlNetTask,
    DenoisingTask,
    GraphSpec,
    VAETask,
)
from mobius.tasks._feature_extraction import FeatureExtractionTask
from mobius.tasks._image_classification import ImageClassificationTask
from mobius.tasks._seq2seq import Seq2SeqTask
from mobius.tasks._speech_to_text import SpeechToTextTask
from mobius.tasks._vision_language import VisionLanguageTask
from mobius.tasks._zero_shot import ZeroShotImageClassificationTask

TASKS: dict[str, type[ModelTask]] = {
    task.name: task
    for task in (
        AdapterTask,
        AudioFeatureExtractionTask,
        CausalLMTask,
        ControlNetTask,
        CrossAttentionVisionLanguageTask,
        DenoisingTask,
        FeatureExtractionTask,
        ImageClassificationTask,
        Seq2SeqTask,
        SpeechToTextTask,
        VAETask,
        VisionLanguageTask,
        ZeroShotImageClassificationTask,
    )
}


def get_task(name: str) -> ModelTask:
    """A task instance by its name (``"causal-lm"``)."""
    try:
        return TASKS[name]()
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(sorted(TASKS))}") from None


__all__ = [
    "OPSET",
    "TASKS",
    "AdapterTask",
    "AudioFeatureExtractionTask",
    "CausalLMTask",
    "ControlNetTask",
    "CrossAttentionVisionLanguageTask",
    "DenoisingTask",
    "FeatureExtractionTask",
    "GraphSpec",
    "ImageClassificationTask",
    "ModelTask",
    "Seq2SeqTask",
    "SpeechToTextTask",
    "VAETask",
    "VisionLanguageTask",
    "ZeroShotImageClassificationTask",
    "get_task",
]
