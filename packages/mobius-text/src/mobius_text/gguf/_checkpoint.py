"""A GGUF file as a HuggingFace checkpoint: its tensors by HF name, in HF layout.

llama.cpp's converter renames tensors (``blk.N.attn_q.weight``), stores norm
weights of Gemma as ``1 + w``, and for the ``llama`` architecture permutes the rows
of the query and key projections (per head, interleaving the two rotary halves).
:class:`GGUFCheckpoint` undoes all three, so its tensors are the ones the HF model
was converted from. The facts come from llama.cpp's converter and transformers'
GGUF loader.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping

import numpy as np
import onnx_ir as ir

from mobius.errors import CheckpointError
from mobius.weights import REPACKABLE, Closing, GGUFFile, GGUFTensor, RepackedWeight
from mobius_text.gguf._config import GEMMA, PERMUTED_QK, architecture, gguf_config

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_ARCH_LAYER_NAMES = {  # where an architecture differs from the table above
    "gemma2": {
        "ffn_norm": "pre_feedforward_layernorm",
        "post_attention_norm": "post_attention_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
    },
    "phi3": {"ffn_up": "mlp.gate_up_proj"},
}
_ARCH_LAYER_NAMES["gemma3"] = _ARCH_LAYER_NAMES["gemma2"]
_INT_TYPES = {
    "I8": ir.DataType.INT8,
    "I16": ir.DataType.INT16,
    "I32": ir.DataType.INT32,
    "I64": ir.DataType.INT64,
}
_LAYER = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def hf_name(arch: str, gguf_name: str) -> str | None:
    """The HF checkpoint name of a GGUF tensor, or None when the tensor has no HF counterpart."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _LAYER.fullmatch(gguf_name)
    if m is None:
        return None
    layer, part, kind = m.groups()
    names = {**_LAYER_NAMES, **_ARCH_LAYER_NAMES.get(arch, {})}
    return f"model.layers.{layer}.{names[part]}.{kind}" if part in names else None


def _qk_row_order(rows: int, heads: int) -> np.ndarray:
    """HF row ``i`` of a llama Q/K projection is GGUF row ``order[i]``.

    The converter maps each head's rows ``[half0 | half1]`` to interleaved pairs
    ``(half0[j], half1[j])``; this is transformers' ``_reverse_permute_weights``.
    """
    return np.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(-1)


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
        """Whether :meth:`repack` gives ``MatMulNBits`` parts: a 2-D Q4_0, Q4_1 or Q8_0 tensor.

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
        for gguf_name, tensor in file.tensors.items():
            if gguf_name.startswith(("rope_factors_", "rope_freqs")):
                continue
            name = hf_name(arch, gguf_name) or gguf_name
            rows = None
            if arch in PERMUTED_QK and re.search(r"\.attn_[qk]\.", gguf_name):
                key = "num_attention_heads" if ".attn_q." in gguf_name else "num_key_value_heads"
                heads = self.config[key]
                if tensor.shape[0] % (2 * heads):
                    raise CheckpointError(
                        f"{file.path}: {gguf_name} has {tensor.shape[0]} rows, "
                        f"not a whole number of rotary pairs for {heads} heads"
                    )
                rows = _qk_row_order(tensor.shape[0], heads)
            offset = 1.0 if arch in GEMMA and gguf_name.endswith("norm.weight") else 0.0
            self._weights[name] = GGUFWeight(name, tensor, rows, offset)

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
