"""The multimodal-decoder contract: encoders of other inputs feeding a text decoder.

A family that reads images, audio or both into a causal text decoder builds, in its
split form (the default), one graph per kind of input plus two:

- ``<encoder>/model.onnx`` for each of the task's :meth:`encoders
  <MultimodalDecoderTask.encoders>` (``vision/``, ``audio/``...): that kind of input ->
  its features [num_tokens, hidden], every item's tokens in order, already projected to
  the text decoder's width;
- ``embedding/model.onnx``: ``input_ids`` int64 [batch, sequence] and every encoder's
  outputs (in the order of the encoders) -> ``inputs_embeds`` [batch, sequence,
  hidden], the token embeddings with each kind's placeholders replaced by its features
  in order (feed an encoder's outputs with no rows when the ids hold none of its
  placeholders);
- ``decoder/model.onnx``: the causal-LM contract with ``inputs_embeds`` in place of
  ``input_ids`` (``attention_mask``, ``position_ids``, ``past_key_values.{i}.*`` ->
  ``logits``, ``present.{i}.*``).

The single form (a config whose ``form`` is ``"single"``) writes one ``model.onnx``:
the causal-LM contract plus every encoder's inputs; a decode step (or a prompt without
that kind of input) passes them with no rows, and an ``If`` skips that encoder then.

The module gives ``embed(op, input_ids, *encoder_outputs, *embedding_inputs)`` and
``decode(op, inputs_embeds, attention_mask, position_ids, past, *extras)``, describes
its cache like a causal LM, and may name ``embedding_inputs()`` (what the processor
gives the embedding beside the ids), ``embedding_outputs()`` (what the embedding gives
the decoder beside ``inputs_embeds``), ``decoder_inputs()`` and
``decoder_inputs_from_ids(op, input_ids)`` (the decoder's own extra inputs, and how
the single graph derives them). A domain's task subclasses :class:`MultimodalDecoderTask`
and lists its :class:`EncoderGraph` objects; its families' modules subclass
:class:`MultimodalDecoderModel` (a registered text decoder as ``language_model``, the
hooks' defaults); :mod:`mobius.multimodal` runs the packages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from mobius.components import embeddings_given, module_scope, realize_parameters, scan_body
from mobius.model import Model
from mobius.tasks._base import IR_VERSION, ModelTask, set_output, twin_module
from mobius.tasks._causal_lm import INT64, cache_layout, present_shape
from mobius.weights import rename_prefixes


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
class EncoderGraph:
    """One graph of the split form that encodes a kind of input for the embedding graph.

    ``inputs(dtype)`` are its graph inputs ``(name, dtype, shape)``; ``modules()`` the
    submodules ``features(op, *inputs)`` reads; ``outputs()`` its outputs ``(name,
    shape)``, which ``features`` returns one value each and the embedding graph takes by
    name, in the order of :meth:`MultimodalDecoderTask.encoders`.
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


class MultimodalDecoderModel(Model):
    """A module over a text decoder, ``language_model`` (a registered causal LM), that other
    encoders feed: the decoder side of the contract and the weights' routing.

    A subclass builds ``language_model`` and its encoders, gives ``embed`` (most merge their
    features at a placeholder id into :meth:`token_embeddings`) and the encoder hooks its
    task lists, and sets :attr:`renames` for the checkpoint layouts it reads.
    """

    #: Checkpoint key prefixes and the module paths they map to, first match wins: every
    #: layout (the hub's, transformers 4.5x's, 5's) to the module tree.
    renames: ClassVar[dict[str, str]] = {}

    def token_embeddings(self, op, input_ids):
        """``[batch, sequence, hidden]``: the decoder's own token embeddings, under its names."""
        decoder = self.language_model
        with module_scope(op, decoder, decoder.model):
            return decoder.model.embed_tokens(op, input_ids)

    def embedding_inputs(self) -> list[tuple]:
        """The embedding graph's inputs the processor gives beyond ``input_ids`` and the
        encoders' outputs: ``(name, dtype, shape)``; ``embed`` takes them last."""
        return []

    def embedding_outputs(self) -> list[tuple]:
        """The embedding graph's outputs ``(name, shape)`` beyond ``inputs_embeds``; ``embed``
        returns them after it, and :meth:`decode` takes them before its ``decoder_inputs``."""
        return []

    def decoder_inputs(self) -> list[tuple]:
        """The decoder graph's inputs beyond the causal-LM ones: ``(name, dtype, shape)``."""
        return []

    def decoder_inputs_from_ids(self, op, input_ids) -> list:
        """The values of :meth:`decoder_inputs` in the single graph, which has ``input_ids``."""
        return []

    def decode(self, op, inputs_embeds, attention_mask, position_ids, past_key_values):
        """The text decoder's logits and cache, from embeddings."""
        with embeddings_given(op, self.language_model):
            return self.language_model(
                op, inputs_embeds, attention_mask, position_ids, past_key_values
            )

    def cache_layout(self):
        return cache_layout(self.language_model)

    @property
    def ignored(self) -> tuple[str, ...]:
        """The decoder's own patterns under ``language_model.``; families add the encoder
        tensors their graphs do not read."""
        decoder = self.language_model.ignored
        return (*super().ignored, *(f"language_model.{pattern}" for pattern in decoder))

    def sanitize(self, weights: dict) -> dict:
        """:attr:`renames` applied; the decoder's own exceptions (a tied head's copy) as its
        text-only build makes them."""
        renamed = rename_prefixes(weights, self.renames)
        prefix = "language_model."
        text = {k[len(prefix) :]: v for k, v in renamed.items() if k.startswith(prefix)}
        text = self.language_model.sanitize(text)
        rest = {k: v for k, v in renamed.items() if not k.startswith(prefix)}
        return {**rest, **{prefix + k: v for k, v in text.items()}}


class MultimodalDecoderTask(ModelTask):
    """Encoders' features merged into a text decoder's embeddings (see the module docstring).

    A subclass names the task and lists its encoder graphs in :meth:`encoders`.
    """

    def encoders(self, module) -> list[EncoderGraph]:
        """The graphs beside the embedding and the decoder, each over one kind of input."""
        raise NotImplementedError(f"{type(self).__name__} lists no encoder graphs")

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        if getattr(config, "form", "split") == "single":
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
    def _encoder_inputs(builder, encoder: EncoderGraph, dtype) -> list:
        return [builder.input(name, t, shape) for name, t, shape in encoder.inputs(dtype)]

    @staticmethod
    def _embedding_inputs(builder, module) -> list:
        """The inputs the processor gives the embedding beyond the ids (module docstring)."""
        return [builder.input(name, t, shape) for name, t, shape in module.embedding_inputs()]

    def _single(self, module, dtype) -> ir.Model:
        graph, builder = self.new_graph("multimodal_decoder")
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

    def _features_if_any(self, op, encoder: EncoderGraph, inputs, dtype):
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
        features = op.If(
            has_inputs,
            then_branch=branch(with_inputs, f"with_{encoder.name}"),
            else_branch=branch(without_inputs, f"without_{encoder.name}"),
            _outputs=len(outputs),
        )
        # ONNX's type inference gives up on a branch with ONNX Runtime's contrib ops.
        for value in _values(features):
            value.dtype = dtype
        return features

    def _encoder_graph(self, encoder: EncoderGraph, dtype) -> ir.Model:
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
