"""Core's multimodal-decoder contract on a toy family, without any domain package.

The toy hears: an ``audio/`` encoder (one matrix over the items' frames), an embedding
that puts the encoder's rows where the ids hold the placeholder, and a one-layer
decoder whose cache keeps the embeddings it has seen. The split and the single forms
must give what numpy computes for the same weights, prefill and a decode step through
the cache, and the single graph must skip the encoder on a step without audio.
"""

from __future__ import annotations

import types

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import Embedding, Linear
from mobius.model import Model
from mobius.multimodal import OnnxMultimodalDecoder
from mobius.tasks import EncoderGraph, MultimodalDecoderTask
from mobius.weights import DerivedTensor, apply_weights

HIDDEN, VOCAB, PLACEHOLDER = 4, 7, 6
CACHE = [[("key", ["batch", 1, "past_sequence", HIDDEN])]]


class ToyHearing(Model):
    """audio -> features; ids + features -> embeddings; a decoder that remembers them."""

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.audio_proj = Linear(HIDDEN, HIDDEN)
        self.embed_tokens = Embedding(VOCAB, HIDDEN)
        self.lm_head = Linear(HIDDEN, VOCAB)

    def audio_inputs(self, dtype):
        return [("frames", dtype, ["items", HIDDEN])]

    def audio_modules(self):
        return [self.audio_proj]

    def audio_features(self, op, frames):
        return self.audio_proj(op, frames)  # [items, hidden]

    def audio_outputs(self):
        return [("audio_features", ["tokens", HIDDEN])]

    def embed(self, op, input_ids, features):
        tokens = self.embed_tokens(op, input_ids)  # [batch, sequence, hidden]
        is_audio = op.Equal(input_ids, op.Constant(value_int=PLACEHOLDER))
        # the n-th placeholder takes the n-th row; a zero row after the features keeps
        # the Gather valid when there are none
        order = op.Sub(op.CumSum(op.Cast(is_audio, to=ir.DataType.INT64), 1), 1)
        order = op.Max(order, op.Constant(value_int=0))
        rows = op.Concat(features, op.ConstantOfShape(op.Constant(value_ints=[1, HIDDEN])), axis=0)
        return op.Where(op.Unsqueeze(is_audio, [-1]), op.Gather(rows, order), tokens)

    def embedding_inputs(self):
        return []

    def embedding_outputs(self):
        return []

    def decoder_inputs(self):
        return []

    def decoder_inputs_from_ids(self, op, input_ids):
        return []

    def cache_layout(self):
        return CACHE

    def decode(self, op, inputs_embeds, attention_mask, position_ids, past):
        (past_key,) = past[0]
        key = op.Concat(past_key, op.Unsqueeze(inputs_embeds, [1]), axis=2)  # [b, 1, total, h]
        memory = op.ReduceMean(key, op.Constant(value_ints=[1, 2]), keepdims=0)  # [b, h]
        hidden = op.Add(inputs_embeds, op.Unsqueeze(memory, [1]))
        return self.lm_head(op, hidden), [(key,)]


class ToyTask(MultimodalDecoderTask):
    name = "toy-hearing"

    def encoders(self, module):
        return [
            EncoderGraph(
                "audio",
                module.audio_inputs,
                module.audio_modules,
                module.audio_features,
                module.audio_outputs,
            )
        ]


class ToyPackage(OnnxMultimodalDecoder):
    ENCODERS = ("audio",)


WEIGHTS = {
    name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    for seed, (name, shape) in enumerate(
        [
            ("audio_proj.weight", (HIDDEN, HIDDEN)),
            ("embed_tokens.weight", (VOCAB, HIDDEN)),
            ("lm_head.weight", (VOCAB, HIDDEN)),
        ]
    )
}


def reference(input_ids, frames, past):
    """numpy's logits and cache for one step."""
    features = frames @ WEIGHTS["audio_proj.weight"].T
    embeds = WEIGHTS["embed_tokens.weight"][input_ids]
    embeds[input_ids == PLACEHOLDER] = features
    key = np.concatenate([past, embeds[:, None]], axis=2)
    return (embeds + key.mean(axis=(1, 2))[:, None]) @ WEIGHTS["lm_head.weight"].T, key


@pytest.fixture(scope="module", params=["split", "single"])
def package(request, tmp_path_factory):
    config = types.SimpleNamespace(form=request.param, vocab_size=VOCAB)
    config.text = types.SimpleNamespace(hidden_size=HIDDEN)
    graphs = ToyTask().build(ToyHearing(config), config, ir.DataType.FLOAT)
    root = tmp_path_factory.mktemp(request.param)
    sources = {  # as a build hands them over: lazy, typed
        name: DerivedTensor(lambda a=a: a, a.shape, ir.DataType.FLOAT)
        for name, a in WEIGHTS.items()
    }
    apply_weights(graphs.values(), sources)  # strict: every parameter, every tensor
    for name, model in graphs.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        ir.save(model, root / f"{name}.onnx")
    return request.param, root


def test_the_forms_lay_out_the_graphs(package):
    form, root = package
    found = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.onnx"))
    split = ["audio/model.onnx", "decoder/model.onnx", "embedding/model.onnx"]
    assert found == (split if form == "split" else ["model.onnx"])


def test_prefill_and_a_decode_step_equal_numpy(package):
    _, root = package
    model = ToyPackage(root)
    ids = np.array([[1, PLACEHOLDER, PLACEHOLDER, 2]], np.int64)
    frames = np.random.default_rng(9).standard_normal((2, HIDDEN)).astype(np.float32)
    mask, positions = np.ones_like(ids), np.arange(4)[None]
    logits, cache = model(ids, {"frames": frames}, mask, positions, model.empty_cache(1))
    expected, key = reference(ids, frames, np.zeros((1, 1, 0, HIDDEN), np.float32))
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    step = np.array([[3]], np.int64)  # no audio: the single graph's If skips the encoder
    logits, cache = model(step, None, np.ones((1, 5), np.int64), np.array([[4]]), cache)
    expected, _ = reference(step, frames[:0], key)
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    assert cache["past_key_values.0.key"].shape == (1, 1, 5, HIDDEN)
