"""CANINE: characters hashed into embeddings, downsampled to molecules, a deep encoder, upsampled.

- embeddings: each code point ``c`` reads ``num_hash_functions`` shards
  (``HashBucketCodepointEmbedder_i[((c + 1) * prime_i) % num_hash_buckets]``), concatenated,
  plus token-type and position embeddings (``char_position_embeddings``), LayerNorm;
- ``initial_char_encoder``: one BERT layer whose queries attend only the keys of their
  own chunk of ``local_transformer_stride`` characters (dense and masked: ``chars ** 2``
  scores where transformers' chunks keep ``chars * stride``; a row of pads only is
  uniform over its chunk, as transformers');
- ``chars_to_molecules``: a strided conv (``downsampling_rate``), the activation, the last
  molecule dropped and the first character prepended, LayerNorm; the molecules' mask is
  the max over each ``downsampling_rate`` characters;
- ``encoder``: BERT layers over the molecules; ``pooler`` (tanh) on the first molecule
  for sequence classification and multiple choice;
- the molecules (the first left out) are repeated ``downsampling_rate`` times, the last
  one to the full length, concatenated with the characters, and ``projection`` (a conv of
  ``upsampling_kernel_size``, activation, LayerNorm) and ``final_char_encoder`` (one
  full-attention BERT layer) give the characters' states.

There is no masked-LM head (transformers has none); the heads are ``classifier`` on the
pooled molecule or on each character, and ``qa_outputs``. The input ids are Unicode
code points (CANINE's tokenizer).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    get_activation,
    lowest_value,
    padding_bias,
)
from mobius.config import EncoderConfig
from mobius.errors import ConfigError
from mobius_text.models._bert_common import POOLED_HEADS, EncoderForFeatureExtraction
from mobius_text.models.bert import BertEncoder, BertPooler

PRIMES = [31, 43, 59, 61, 73, 97, 103, 113, 137, 149, 157, 173, 181, 193, 211, 223]
INT64 = ir.DataType.INT64


@dataclass
class CanineConfig(EncoderConfig):
    """Encoder fields plus the hashing, the down/upsampling and the local attention's chunk."""

    num_hash_functions: int = 8
    num_hash_buckets: int = 16384
    downsampling_rate: int = 4
    upsampling_kernel_size: int = 4
    local_transformer_stride: int = 128

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        hf_config = copy.copy(hf_config)
        hf_config.vocab_size = 0  # code points, hashed: no vocabulary
        fields = super().hf_fields(hf_config)
        hashes = int(hf_config.num_hash_functions)
        if hashes > len(PRIMES) or fields["hidden_size"] % hashes:
            raise ConfigError(f"num_hash_functions {hashes}: at most 16, dividing the hidden size")
        return {
            **fields,
            "num_hash_functions": hashes,
            "num_hash_buckets": int(hf_config.num_hash_buckets),
            "downsampling_rate": int(hf_config.downsampling_rate),
            "upsampling_kernel_size": int(hf_config.upsampling_kernel_size),
            "local_transformer_stride": int(hf_config.local_transformer_stride),
        }


def _length(op, x):
    return op.Shape(x, start=1, end=2)  # [1]


class CanineEmbeddings(nn.Module):
    def __init__(self, config: CanineConfig) -> None:
        super().__init__()
        shard = config.hidden_size // config.num_hash_functions
        self.primes = PRIMES[: config.num_hash_functions]
        for i in range(config.num_hash_functions):
            setattr(
                self, f"HashBucketCodepointEmbedder_{i}", Embedding(config.num_hash_buckets, shard)
            )
        self.char_position_embeddings = Embedding(config.num_hash_buckets, config.hidden_size)
        self.token_type_embeddings = Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.buckets = config.num_hash_buckets

    def forward(self, op, input_ids, token_type_ids):
        def const(v):
            return op.Constant(value=ir.tensor(v, dtype=INT64))

        shifted, shards = op.Add(input_ids, const(1)), []
        for i, prime in enumerate(self.primes):
            bucket = op.Mod(op.Mul(shifted, const(prime)), const(self.buckets))
            shards.append(getattr(self, f"HashBucketCodepointEmbedder_{i}")(op, bucket))
        x = op.Concat(*shards, axis=-1)  # [batch, chars, hidden]
        if token_type_ids is None:
            token_type_ids = op.Constant(value_int=0)
        x = op.Add(x, self.token_type_embeddings(op, token_type_ids))
        positions = op.Range(const(0), op.Squeeze(_length(op, input_ids), [0]), const(1))
        x = op.Add(x, op.Unsqueeze(self.char_position_embeddings(op, positions), [0]))
        return self.LayerNorm(op, x)


class SeqConv(nn.Module):
    """``Conv1d`` over ``[batch, seq, in]`` (``weight [out, in, kernel]``), result ``[batch, seq', out]``."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([out_channels, in_channels, kernel])
        self.bias = nn.Parameter([out_channels])

    def forward(self, op, x, stride: int = 1, pads: tuple[int, int] = (0, 0)):
        y = op.Conv(op.Transpose(x, perm=[0, 2, 1]), self.weight, self.bias,
                    strides=[stride], pads=list(pads))  # fmt: skip
        return op.Transpose(y, perm=[0, 2, 1])


class CharactersToMolecules(nn.Module):
    def __init__(self, config: CanineConfig) -> None:
        super().__init__()
        self.conv = SeqConv(config.hidden_size, config.hidden_size, config.downsampling_rate)
        self.act = get_activation(config.hidden_act)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.rate = config.downsampling_rate

    def forward(self, op, chars):
        molecules = self.act(op, self.conv(op, chars, stride=self.rate))
        molecules = op.Slice(molecules, [0], [-1], [1])  # the last one dropped
        return self.LayerNorm(op, op.Concat(op.Slice(chars, [0], [1], [1]), molecules, axis=1))


class ConvProjection(nn.Module):
    def __init__(self, config: CanineConfig) -> None:
        super().__init__()
        kernel = config.upsampling_kernel_size
        self.conv = SeqConv(2 * config.hidden_size, config.hidden_size, kernel)
        self.act = get_activation(config.hidden_act)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.pads = ((kernel - 1) // 2, kernel - 1 - (kernel - 1) // 2)

    def forward(self, op, x):
        return self.LayerNorm(op, self.act(op, self.conv(op, x, pads=self.pads)))


class CanineModel(nn.Module):
    def __init__(self, config: CanineConfig) -> None:
        super().__init__()
        shallow = type(config)(**{**config.__dict__, "num_hidden_layers": 1})
        self.char_embeddings = CanineEmbeddings(config)
        self.initial_char_encoder = BertEncoder(shallow)
        self.chars_to_molecules = CharactersToMolecules(config)
        self.encoder = BertEncoder(config)
        self.projection = ConvProjection(config)
        self.final_char_encoder = BertEncoder(shallow)
        self.pooler = BertPooler(config.hidden_size) if config.head in POOLED_HEADS else None
        self.rate, self.chunk = config.downsampling_rate, config.local_transformer_stride

    def local_bias(self, op, attention_mask, dtype):
        """``[batch, 1, chars, chars]``: half the lowest value on pads within a chunk, the
        lowest across chunks, so a row of pads only is uniform over its own chunk (as
        transformers' chunked attention). ONNX Runtime's ``Attention`` mishandles ``-inf``."""
        length = op.Squeeze(_length(op, attention_mask), [0])
        chunk = op.Div(op.Range(0, length, 1), op.Constant(value_int=self.chunk))
        same = op.Equal(op.Unsqueeze(chunk, [1]), op.Unsqueeze(chunk, [0]))  # [chars, chars]
        bias = padding_bias(op, attention_mask, dtype)  # 0 or the lowest value
        half = op.Mul(bias, op.CastLike(op.Constant(value_float=0.5), bias))
        return op.Where(same, half, op.CastLike(op.Constant(value_float=lowest_value(dtype)), bias))

    def repeat_molecules(self, op, molecules, chars):
        """``[batch, chars, hidden]``: each molecule but the first ``rate`` times, the last to the end."""
        rest = op.Slice(molecules, [1], [np.iinfo(np.int64).max], [1])
        repeated = op.Expand(op.Unsqueeze(rest, [2]), op.Constant(value_ints=[1, 1, self.rate, 1]))
        hidden = op.Shape(molecules, start=2, end=3)
        repeated = op.Reshape(repeated, op.Concat(op.Constant(value_ints=[0, -1]), hidden, axis=0))
        remainder = op.Add(op.Mod(_length(op, chars), op.Constant(value_ints=[self.rate])),
                           op.Constant(value_ints=[self.rate]))  # fmt: skip
        last = op.Slice(molecules, [-1], [np.iinfo(np.int64).max], [1])
        tail = op.Expand(last, op.Concat(op.Constant(value_ints=[1]), remainder, [1], axis=0))
        return op.Concat(repeated, tail, axis=1)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        chars = self.char_embeddings(op, input_ids, token_type_ids)  # [batch, chars, hidden]
        chars = self.initial_char_encoder(
            op, chars, self.local_bias(op, attention_mask, chars.dtype)
        )
        molecules = self.chars_to_molecules(op, chars)  # [batch, chars // rate, hidden]
        windows = op.Reshape(
            op.Slice(attention_mask, [0], op.Mul(op.Div(_length(op, attention_mask),
                     op.Constant(value_ints=[self.rate])), op.Constant(value_ints=[self.rate])), [1]),
            op.Constant(value_ints=[0, -1, self.rate]),
        )  # fmt: skip
        molecule_mask = op.ReduceMax(windows, [2], keepdims=0)  # [batch, chars // rate]
        molecules = self.encoder(op, molecules, padding_bias(op, molecule_mask, chars.dtype))
        pooled = self.pooler(op, molecules) if self.pooler is not None else None
        x = op.Concat(chars, self.repeat_molecules(op, molecules, chars), axis=-1)
        x = self.final_char_encoder(
            op, self.projection(op, x), padding_bias(op, attention_mask, chars.dtype)
        )
        return x, pooled


class CanineForFeatureExtraction(EncoderForFeatureExtraction):
    """``canine.*`` and the head: ``classifier`` (on the pooled first molecule, or per
    character) or ``qa_outputs``."""

    config_class = CanineConfig
    uses_token_type_ids = True
    base_model_prefix = "canine"
    model_class = CanineModel
    head_names = ("classifier", "qa_outputs")
    optional_parts = ("pooler",)
    unread = ("char_embeddings.position_ids",)

    def __init__(self, config: CanineConfig) -> None:
        super().__init__(config)
        hidden, labels = config.hidden_size, config.num_labels
        if config.head == "masked-lm":
            raise ConfigError("canine has no masked-LM head (transformers has none)")
        if config.head == "sequence-classification":
            self.classifier = Linear(hidden, labels, bias=True)
        elif config.head == "multiple-choice":
            self.classifier = Linear(hidden, 1, bias=True)
        elif config.head == "token-classification":
            self.classifier = Linear(hidden, labels, bias=True)
        elif config.head == "question-answering":
            self.qa_outputs = Linear(hidden, labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden, pooled = self.base_model(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        if self.classifier is not None:
            outputs["logits"] = self.classifier(op, hidden if pooled is None else pooled)
        elif self.qa_outputs is not None:
            outputs["logits"] = self.qa_outputs(op, hidden)
        return outputs


MODEL_TYPES = {"canine": CanineForFeatureExtraction}
