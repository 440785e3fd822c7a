"""A GGUF file as a HuggingFace checkpoint: its tensors by HF name, in HF layout.

llama.cpp's converter renames tensors (``blk.N.attn_q.weight``), and per family
changes some: permuted llama Q/K rows, Gemma's ``1 + w`` norms, stacked experts,
Falcon's reordered ``query_key_value``... (:mod:`mobius_text.gguf._tensors` lists
them). :class:`GGUFCheckpoint` undoes each, so its tensors are the ones the HF model
was converted from. The facts come from llama.cpp's converter and transformers'
GGUF loader.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping

import numpy as np
import onnx_ir as ir

from mobius.errors import CheckpointError
from mobius.weights import REPACKABLE, Closing, GGUFFile, GGUFTensor, RepackedWeight
from mobius_text.gguf._config import architecture, gguf_config
from mobius_text.gguf._tensors import TensorSpec, tensor_specs

_INT_TYPES = {
    "I8": ir.DataType.INT8,
    "I16": ir.DataType.INT16,
    "I32": ir.DataType.INT32,
    "I64": ir.DataType.INT64,
}


class GGUFWeight:
    """One GGUF tensor under its HF name, in HF layout (``[out, in]`` for linear weights).

    Attributes:
        name: The HF name. ``shape``: its shape. ``dtype``: FLOAT (every float and
            block type decodes to float32), or the integer type of an integer tensor.
        nbytes: The size of the decoded data.
        tensor: The underlying :class:`~mobius.weights.GGUFTensor`.
    """

    __slots__ = ("_norm_offset", "_rows", "dtype", "name", "nbytes", "shape", "tensor")

    def __init__(self, name: str, tensor: GGUFTensor, rows=None, norm_offset=0.0) -> None:
        self.name, self.tensor, self.shape = name, tensor, tensor.shape
        self.dtype = _INT_TYPES.get(tensor.type_name, ir.DataType.FLOAT)
        self.nbytes = int(self.dtype.itemsize) * math.prod(tensor.shape)
        self._rows, self._norm_offset = rows, norm_offset

    def numpy(self) -> np.ndarray:
        """The weight decoded to float32, un-permuted, with Gemma's ``1 +`` removed."""
        array = self.tensor.numpy()
        if self._rows is not None:
            array = array[self._rows]
        if self._norm_offset:
            array = array - np.float32(self._norm_offset)
        return array

    @property
    def type_name(self) -> str:
        """The GGML type of the stored tensor (``Q4_1``, ``F32``...)."""
        return self.tensor.type_name

    @property
    def repackable(self) -> bool:
        """Whether :meth:`repack` gives ``MatMulNBits`` parts: a 2-D tensor in GGML blocks.

        Answered from the header, without reading the data.
        """
        return self.tensor.type_name in REPACKABLE and len(self.shape) == 2

    def repack(self) -> RepackedWeight | None:
        """The weight as ``MatMulNBits`` parts (rows un-permuted), or None if its type has none."""
        repacked = self.tensor.repack()
        if repacked is not None and self._rows is not None:
            repacked = repacked.take_rows(self._rows)
        return repacked

    def load(self, repack: bool = True) -> np.ndarray | RepackedWeight:
        """:meth:`repack` where the type allows it (and ``repack`` is true), else :meth:`numpy`."""
        repacked = self.repack() if repack else None
        return repacked if repacked is not None else self.numpy()

    def __repr__(self) -> str:
        return f"GGUFWeight({self.name!r}, {self.tensor.type_name}, shape={self.shape})"


class DerivedGGUFWeight(GGUFWeight):
    """A GGUF tensor whose values or shape the converter changed (Mamba's ``A``, a squeezed
    conv weight): decoded, then mapped back. Its blocks are never handed out as they are.
    """

    __slots__ = ("_transform",)

    def __init__(self, name: str, tensor: GGUFTensor, shape, transform) -> None:
        super().__init__(name, tensor)
        self.shape, self._transform = tuple(shape), transform
        self.nbytes = int(self.dtype.itemsize) * math.prod(self.shape)

    def numpy(self) -> np.ndarray:
        """The stored tensor decoded to float32, then through the converter's inverse."""
        array = np.asarray(self._transform(self.tensor.numpy()), dtype=np.float32)
        if array.shape != self.shape:
            raise CheckpointError(f"{self.name}: decoded to {array.shape}, expected {self.shape}")
        return array

    @property
    def repackable(self) -> bool:
        """Never: the stored blocks are not this tensor's values."""
        return False

    def repack(self) -> None:
        """None: the stored blocks are not this tensor's values."""
        return None


def _weight(spec: TensorSpec) -> GGUFWeight:
    if spec.transform is None and spec.shape is None:
        return GGUFWeight(spec.name, spec.tensor, spec.rows, spec.norm_offset)
    if spec.rows is not None or spec.norm_offset:
        raise CheckpointError(f"{spec.name}: a transformed tensor takes no row order or offset")
    shape = spec.tensor.shape if spec.shape is None else spec.shape
    return DerivedGGUFWeight(spec.name, spec.tensor, shape, spec.transform or (lambda a: a))


class GGUFCheckpoint(Closing, Mapping[str, GGUFWeight]):
    """The tensors of a GGUF file by HF name, with the config its metadata describes.

    Tensors with no HF counterpart keep their GGUF name (so a strict apply reports
    them), except ``rope_factors_*`` and ``rope_freqs`` which :func:`gguf_config`
    turned into the config's ``rope_scaling``.
    """

    def __init__(self, file: GGUFFile) -> None:
        self.file = file
        self.config = gguf_config(file)
        arch = architecture(file)
        self._weights: dict[str, GGUFWeight] = {}
        for spec in tensor_specs(file, arch, self.config):
            if spec.name in self._weights:
                raise CheckpointError(f"{file.path}: two tensors map to {spec.name}")
            self._weights[spec.name] = _weight(spec)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> GGUFCheckpoint:
        """Parse a ``.gguf`` file's header and map it to HF names and config.

        Raises:
            CheckpointError: The file is missing, truncated or corrupt.
            ModelSourceError: Its architecture is not supported.
        """
        file = GGUFFile.open(path)
        try:
            return cls(file)
        except BaseException:
            file.close()
            raise

    def close(self) -> None:
        """Release the memory map; arrays already returned stay valid."""
        self.file.close()

    def __getitem__(self, name: str) -> GGUFWeight:
        return self._weights[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._weights)

    def __len__(self) -> int:
        return len(self._weights)

    def __repr__(self) -> str:
        return f"GGUFCheckpoint({str(self.file.path)!r}, {len(self)} tensors)"
