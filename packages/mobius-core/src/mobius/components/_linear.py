"""Linear projections, embeddings and the parameter kinds the weight pipeline understands."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn


class TransposedParameter(nn.Parameter):
    """A 2-D weight kept as ``[in, out]`` so ``MatMul`` needs no Transpose node.

    Checkpoints store linear weights ``[out, in]``; the weight pipeline checks the
    checkpoint tensor against :attr:`checkpoint_shape` and transposes it while
    streaming it to disk.
    """

    def __init__(self, out_features: int, in_features: int, name: str | None = None) -> None:
        super().__init__([in_features, out_features], name=name)
        self.checkpoint_shape = (out_features, in_features)
        # from_checkpoint is exactly this transpose: the pipeline may stream it in row blocks.
        self.checkpoint_axes = (1, 0)

    def from_checkpoint(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array.T)


def checkpoint_shape(param: ir.Value) -> tuple[int, ...]:
    """The shape a checkpoint stores ``param`` in (its own shape unless it says otherwise)."""
    return tuple(getattr(param, "checkpoint_shape", param.shape))


class Linear(nn.Module):
    """``y = x @ W.T + b`` with the checkpoint's ``weight [out, in]`` and optional ``bias [out]``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = TransposedParameter(out_features, in_features)
        self.bias = nn.Parameter([out_features]) if bias else None

    def forward(self, op, x: ir.Value) -> ir.Value:
        y = op.MatMul(x, self.weight)
        return op.Add(y, self.bias) if self.bias is not None else y


class Embedding(nn.Module):
    """Token lookup in ``weight [num_embeddings, dim]``."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([num_embeddings, embedding_dim])

    def forward(self, op, ids: ir.Value) -> ir.Value:
        return op.Gather(self.weight, ids, axis=0)


class TiedLMHead(nn.Module):
    """An output projection that reuses an embedding matrix ``[vocab, hidden]``.

    ``Gemm`` with ``transB`` reads the shared matrix as it is, so the graph keeps
    a single copy and the runtime makes no transposed one. With ``bias`` the head
    still owns a ``bias [vocab]`` (tied Phi, CTRL and GPT-J checkpoints keep one),
    added to the logits.
    """

    def __init__(self, embedding: Embedding, bias: bool = False) -> None:
        super().__init__()
        # Held as a plain attribute: the parameter belongs to the embedding.
        object.__setattr__(self, "embedding", embedding)
        self.bias = nn.Parameter([embedding.weight.shape[0]]) if bias else None

    def forward(self, op, x: ir.Value) -> ir.Value:
        flat = op.Reshape(x, op.Constant(value_ints=[-1, self.embedding.weight.shape[1]]))
        logits = op.Gemm(flat, self.embedding.weight, transB=1)  # [batch*seq, vocab]
        out_shape = op.Concat(
            op.Slice(op.Shape(x), [0], [-1]), op.Constant(value_ints=[-1]), axis=0
        )
        logits = op.Reshape(logits, out_shape)  # [batch, seq, vocab]
        return op.Add(logits, self.bias) if self.bias is not None else logits
