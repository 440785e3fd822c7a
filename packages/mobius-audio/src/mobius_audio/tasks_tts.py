"""The ``text-to-audio`` contract: text in, a waveform out, in two graphs (VITS / MMS-TTS).

Registered with core's registry by :mod:`mobius_audio.plugin`. The model samples:
every random draw is a graph **input**, so a run is reproducible and a test can
feed transformers the same draws. The runner (:mod:`mobius_audio.tts`) draws them
from a standard normal with numpy (``--seed``); the graphs scale them by the
config's ``noise_scale_duration`` and ``noise_scale``, as transformers does.

``text_encoder/model.onnx``
    inputs ``input_ids`` int64 [batch, text] (the package's tokenizer: VITS's
    characters, interspersed with the blank id 0), ``attention_mask`` int64
    [batch, text] (1 real, 0 padding) and ``duration_noise`` float [batch, 2,
    text] (standard normal: the stochastic duration predictor's latents; a model
    with the deterministic predictor, ``use_stochastic_duration_prediction=False``,
    has no such input and draws no duration noise).
    Outputs ``prior_means`` and ``prior_log_variances`` float [batch, flow_size,
    frames] (the text's prior repeated over each character's frames by the
    monotonic alignment of the predicted durations), ``frame_mask`` int64 [batch,
    frames] (1 for a clip's frames, 0 past its end; ``frames`` is the longest
    clip's) and ``waveform_lengths`` int64 [batch] (each clip's samples: its
    frames times the product of ``upsample_rates``).

``vocoder/model.onnx``
    inputs ``prior_means``, ``prior_log_variances``, ``frame_mask`` (as the first
    graph returns them) and ``prior_noise`` float [batch, flow_size, frames]
    (standard normal: the prior sample is ``mean + noise * exp(log_variance) *
    noise_scale``); output ``waveform`` float [batch, samples] in [-1, 1],
    ``samples = frames * prod(upsample_rates)``. A clip shorter than the batch's
    longest is followed by what the vocoder makes of silence: cut it at its
    ``waveform_lengths``.

A multi-speaker model (``num_speakers > 1``) also takes ``speaker_id`` int64
[batch] (0 to ``num_speakers - 1``) as the last input of both graphs; the
runner's default is speaker 0.

The sample rate is the config's ``sampling_rate`` (``config.json``, copied into
the package). The module provides ``encode_text(op, input_ids, attention_mask,
duration_noise) -> dict`` (the four outputs above), ``synthesize(op,
prior_means, prior_log_variances, frame_mask, prior_noise) -> waveform`` and
``noise_channels() -> {"duration_noise": 2, "prior_noise": flow_size}`` (no
``duration_noise`` for a deterministic predictor, nor that argument of
``encode_text``) and ``num_speakers()``; with more than one speaker, both stages
take ``speaker_id`` last.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.errors import ConfigError
from mobius.tasks import IR_VERSION, ModelTask, set_output, twin_module

INT64 = ir.DataType.INT64


def prior_shapes(flow_size: int) -> dict[str, list]:
    """The stage-one outputs that the vocoder reads back as inputs, with their shapes."""
    return {
        "prior_means": ["batch", flow_size, "frames"],
        "prior_log_variances": ["batch", flow_size, "frames"],
        "frame_mask": ["batch", "frames"],
    }


class TextToAudioTask(ModelTask):
    """Two graphs, ``text_encoder/model`` and ``vocoder/model``; see the module docstring."""

    name = "text-to-audio"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        if dtype != ir.DataType.FLOAT:  # the spline and alignment are written in float32
            raise ConfigError(f"text-to-audio graphs are built in float32, not {dtype.name}")
        channels = module.noise_channels()
        prior_shape = prior_shapes(channels["prior_noise"])
        graph, builder = self.new_graph("text_encoder")
        input_ids = builder.input("input_ids", INT64, ["batch", "text"])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "text"])
        noise = []  # a deterministic duration predictor draws none
        if "duration_noise" in channels:
            shape = ["batch", channels["duration_noise"], "text"]
            noise = [builder.input("duration_noise", dtype, shape)]
        speaker = self._speaker_input(module, builder)
        outputs = module.encode_text(builder.op, input_ids, attention_mask, *noise, *speaker)
        for name, shape in prior_shape.items():
            set_output(
                builder, outputs[name], name, INT64 if name == "frame_mask" else dtype, shape
            )
        set_output(builder, outputs["waveform_lengths"], "waveform_lengths", INT64, ["batch"])
        text_encoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

        vocoder_module = twin_module(module)
        graph, builder = self.new_graph("vocoder")
        prior = [
            builder.input(name, INT64 if name == "frame_mask" else dtype, shape)
            for name, shape in prior_shape.items()
        ]
        noise = builder.input("prior_noise", dtype, ["batch", channels["prior_noise"], "frames"])
        speaker = self._speaker_input(module, builder)
        waveform = vocoder_module.synthesize(builder.op, *prior, noise, *speaker)
        set_output(builder, waveform, "waveform", dtype, ["batch", "samples"])
        vocoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
        return {"text_encoder/model": text_encoder, "vocoder/model": vocoder}

    @staticmethod
    def _speaker_input(module, builder) -> list[ir.Value]:
        """``[speaker_id]`` for a multi-speaker module, else nothing."""
        if module.num_speakers() <= 1:
            return []
        return [builder.input("speaker_id", INT64, ["batch"])]
