"""The vision–language contracts: one graph, or the split form runtimes load.

``--form split`` (the default) writes three graphs:

- ``vision/model.onnx``: ``pixel_values`` float [num_images, channels, height, width]
  (the module may declare more vision inputs, after ``pixel_values``: InstructBLIP's
  ``qformer_input_ids``/``qformer_attention_mask`` int64 [num_images, qformer_sequence],
  the instruction its Q-Former reads; the single form gets them empty on decode steps)
  -> ``image_features``
  [num_image_tokens, hidden], every image's tokens in order, already projected to
  the text decoder's width;
- ``embedding/model.onnx``: ``input_ids`` int64 [batch, sequence] and
  ``image_features`` -> ``inputs_embeds`` [batch, sequence, hidden], the token
  embeddings with the image placeholders replaced by the features in order
  (feed ``image_features`` with no rows when the ids hold no placeholder);
- ``decoder/model.onnx``: the causal-LM contract with ``inputs_embeds`` in place of
  ``input_ids`` (``attention_mask``, ``position_ids``, ``past_key_values.{i}.*`` ->
  ``logits``, ``present.{i}.*``).

``--form single`` writes ``model.onnx``: the causal-LM contract plus
``pixel_values``; decode steps pass ``pixel_values`` with no images (an ``If``
skips the vision tower then).

The module gives ``vision_inputs(dtype)``, ``vision_modules()`` (the submodules
``image_features`` reads), ``image_features(op, *vision_inputs)``,
``embed(op, input_ids, image_features)`` and ``decode(op, inputs_embeds,
attention_mask, position_ids, past, *extras)``, and describes its cache like a
causal LM. ``extras`` are the family's own decoder inputs, ``decoder_inputs()``
(Gemma 3's ``token_type_ids``, which mark the image tokens that attend both ways);
the single graph derives them from ``input_ids`` (``decoder_inputs_from_ids``).

A family whose image placement the processor gives, not the ids (Kosmos-2's
``image_embeds_position_mask`` int64 [batch, sequence], 1 where an image feature goes,
over ordinary vocabulary ids), names it in ``embedding_inputs()``: the embedding graph
(and the single graph) take it after ``input_ids`` and the encoders' outputs, and
``embed`` gets it last; a decode step feeds it with no rows.

A family whose decoder reads more of the images than the merged embeddings
(Qwen3-VL's DeepStack features, added to the hidden states of its first layers)
names them: ``vision_outputs()`` lists the vision graph's outputs, ``image_features``
first (``image_features`` then returns one value per entry), which the embedding
graph takes by name; ``embedding_outputs()`` lists the embedding graph's outputs
beyond ``inputs_embeds`` (``embed`` then returns them after it), which the decoder
graph takes by name, before ``decoder_inputs()``.

The graphs beside ``embedding/`` and ``decoder/`` are the task's :meth:`encoders
<VisionLanguageTask.encoders>` (here ``vision/``); a variant over more kinds of input
adds one per kind (:mod:`.audio_vision_language`: ``audio/``), whose outputs the
embedding graph takes after the vision graph's, and the single graph gets each one's
inputs (empty where a prompt has none, each tower behind its own ``If``).

The form comes from the build option ``form`` (``mobius build --form``, registered
by mobius-vision). onnxruntime-genai's generator runs the split form of the
families it has a class for (:mod:`mobius_vision.genai`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from mobius.components import realize_parameters, scan_body
from mobius.errors import MobiusError
from mobius.tasks import (
    INT64,
    IR_VERSION,
    ModelTask,
    cache_layout,
    present_shape,
    set_output,
    twin_module,
)
from mobius_vision.config import VISION_LANGUAGE_FORMS, VisionLanguageConfig
from mobius_vision.processing._settings import keep_processor_config


def apply_form(config, options):
    """``config`` with the package layout ``options.plugin["form"]`` asks (``"split"`` by default)."""
    form = options.plugin.get("form", "split")
    if form not in VISION_LANGUAGE_FORMS:
        raise MobiusError(f"unknown form {form!r}; choose {', '.join(VISION_LANGUAGE_FORMS)}")
    if isinstance(config, VisionLanguageConfig):
        config = dataclasses.replace(config, form=form)
    return config


def _decoder_inputs(builder, module, dtype):
    attention_mask = builder.input("attention_mask", INT64, ["batch", "total_sequence"])
    shape = getattr(module, "position_ids_shape", lambda: ["batch", "sequence"])()
    position_ids = builder.input("position_ids", INT64, shape)
    layout = cache_layout(module)
    past = [
        tuple(builder.input(f"past_key_values.{i}.{kind}", dtype, shape) for kind, shape in layer)
        for i, layer in enumerate(layout)
    ]
    return attention_mask, position_ids, past, layout


def _decoder_outputs(builder, module, logits, present, layout, dtype) -> None:
    set_output(builder, logits, "logits", dtype, ["batch", "sequence", module.config.vocab_size])
    for i, (values, layer) in enumerate(zip(present, layout, strict=True)):
        for value, (kind, shape) in zip(values, layer, strict=True):
            set_output(builder, value, f"present.{i}.{kind}", dtype, present_shape(shape))


def _values(result) -> list:
    """A module result of one value or several as a list."""
    return list(result) if isinstance(result, (tuple, list)) else [result]


@dataclasses.dataclass
class Encoder:
    """One graph of the split form that encodes a kind of input for the embedding graph.

    ``inputs(dtype)`` are its graph inputs ``(name, dtype, shape)``; ``modules()`` the
    submodules ``features(op, *inputs)`` reads; ``outputs()`` its outputs ``(name,
    shape)``, which ``features`` returns one value each and the embedding graph takes by
    name, in the order of :meth:`VisionLanguageTask.encoders`.
    """

    name: str
    inputs: Callable[[ir.DataType], list[tuple]]
    modules: Callable[[], list]
    features: Callable[..., Any]
    outputs: Callable[[], list[tuple]]


def _model(graph: ir.Graph) -> ir.Model:
    model = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
    RemoveUnusedNodesPass()(model)  # a graph reads only its part of the weights
    return model


class VisionLanguageTask(ModelTask):
    """Image features merged into a text decoder's embeddings (see the module docstring)."""

    name = "vision-language"
    genai = True

    def configure(self, config, options, source):
        """The config in the form the build asks (:func:`apply_form`); encoder options refused.

        The package keeps the source's HF processor settings, which ``mobius generate``
        reads (:func:`~mobius_vision.processing.keep_processor_config`).
        """
        keep_processor_config(source)
        return apply_form(super().configure(config, options, source), options)

    def genai_config(self, package) -> dict:
        """``genai_config.json`` for a split package of a family the generator has a class for."""
        from mobius_vision.genai import vision_language_genai_config

        return vision_language_genai_config(package, ep=self.ep)

    def encoders(self, module) -> list[Encoder]:
        """The graphs beside the embedding and decoder, each over one kind of input: here the
        vision graph. A variant adds its own (:mod:`.audio_vision_language`)."""
        return [
            Encoder(
                "vision",
                module.vision_inputs,
                module.vision_modules,
                module.image_features,
                module.vision_outputs,
            )
        ]

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        if config.form == "single":
            return {"model": self._single(module, dtype)}
        graphs = {}  # each graph from its own tree (a tied head shares the embedding's weight)
        for index in range(len(self.encoders(module))):
            tree = module if index == 0 else twin_module(module)
            encoder = self.encoders(tree)[index]
            graphs[f"{encoder.name}/model"] = self._encoder_graph(encoder, dtype)
        graphs["embedding/model"] = self._embedding(twin_module(module), dtype)
        graphs["decoder/model"] = self._decoder(twin_module(module), dtype)
        return graphs

    @staticmethod
    def _encoder_inputs(builder, encoder: Encoder, dtype) -> list:
        return [builder.input(name, t, shape) for name, t, shape in encoder.inputs(dtype)]

    @staticmethod
    def _embedding_inputs(builder, module) -> list:
        """The inputs the processor gives the embedding beyond the ids (module docstring)."""
        return [builder.input(name, t, shape) for name, t, shape in module.embedding_inputs()]

    def _single(self, module, dtype) -> ir.Model:
        graph, builder = self.new_graph("vision_language")
        op = builder.op
        input_ids = builder.input("input_ids", INT64, ["batch", "sequence"])
        encoders = self.encoders(module)
        inputs = [self._encoder_inputs(builder, encoder, dtype) for encoder in encoders]
        attention_mask, position_ids, past, layout = _decoder_inputs(builder, module, dtype)
        features = [
            value
            for encoder, values in zip(encoders, inputs, strict=True)
            for value in _values(self._features_if_any(op, encoder, values, dtype))
        ]
        given = self._embedding_inputs(builder, module)
        embeds, *extras = _values(module.embed(op, input_ids, *features, *given))
        extras += module.decoder_inputs_from_ids(op, input_ids)
        logits, present = module.decode(op, embeds, attention_mask, position_ids, past, *extras)
        _decoder_outputs(builder, module, logits, present, layout, dtype)
        return _model(graph)

    def _features_if_any(self, op, encoder: Encoder, inputs, dtype):
        """The encoder's outputs, or none when its first input is empty (a decode step, or a
        prompt without that kind of input).

        An ``If`` keeps the tower off such steps (its ops refuse an empty batch).
        """
        for part in encoder.modules():
            realize_parameters(op, part)  # named in the root graph, not the branch's scope
        outputs = encoder.outputs()

        def with_inputs(op):
            return [op.Identity(v) for v in _values(encoder.features(op, *inputs))]

        def without_inputs(op):  # every output with its symbolic dimensions at zero
            return [
                op.ConstantOfShape(
                    op.Constant(value_ints=[0 if isinstance(d, str) else d for d in shape]),
                    value=ir.tensor([0], dtype=dtype),
                )
                for _, shape in outputs
            ]

        def branch(trace, name):
            outs = [ir.Value(name=f"{name}_{n}", type=ir.TensorType(dtype)) for n, _ in outputs]
            return scan_body(op, trace, inputs=[], outputs=outs, name=name)  # its own names

        count = op.Shape(inputs[0], start=0, end=1)
        has_inputs = op.Squeeze(op.Greater(count, op.Constant(value_ints=[0])), [0])
        return op.If(
            has_inputs,
            then_branch=branch(with_inputs, f"with_{encoder.name}"),
            else_branch=branch(without_inputs, f"without_{encoder.name}"),
            _outputs=len(outputs),
        )

    def _encoder_graph(self, encoder: Encoder, dtype) -> ir.Model:
        graph, builder = self.new_graph(encoder.name)
        features = encoder.features(builder.op, *self._encoder_inputs(builder, encoder, dtype))
        for value, (name, shape) in zip(_values(features), encoder.outputs(), strict=True):
            set_output(builder, value, name, dtype, shape)
        return _model(graph)

    def _embedding(self, module, dtype) -> ir.Model:
        graph, builder = self.new_graph("embedding")
        input_ids = builder.input("input_ids", INT64, ["batch", "sequence"])
        hidden = module.config.text.hidden_size
        features = [
            builder.input(name, dtype, shape)
            for encoder in self.encoders(module)
            for name, shape in encoder.outputs()
        ]
        given = self._embedding_inputs(builder, module)
        embeds, *extras = _values(module.embed(builder.op, input_ids, *features, *given))
        set_output(builder, embeds, "inputs_embeds", dtype, ["batch", "sequence", hidden])
        for value, (name, shape) in zip(extras, module.embedding_outputs(), strict=True):
            set_output(builder, value, name, dtype, shape)
        return _model(graph)

    def _decoder(self, module, dtype) -> ir.Model:
        graph, builder = self.new_graph("decoder")
        hidden = module.config.text.hidden_size
        embeds = builder.input("inputs_embeds", dtype, ["batch", "sequence", hidden])
        attention_mask, position_ids, past, layout = _decoder_inputs(builder, module, dtype)
        extras = [builder.input(name, dtype, shape) for name, shape in module.embedding_outputs()]
        extras += [builder.input(name, t, shape) for name, t, shape in module.decoder_inputs()]
        logits, present = module.decode(
            builder.op, embeds, attention_mask, position_ids, past, *extras
        )
        _decoder_outputs(builder, module, logits, present, layout, dtype)
        return _model(graph)
