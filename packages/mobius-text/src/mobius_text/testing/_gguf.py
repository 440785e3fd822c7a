"""Small GGUF files written with the ``gguf`` package, for tests (test-only dependency)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# Byte offsets of the fp16 fields (d, dmin) in each block type's layout (ggml-common.h).
_FP16_FIELDS = {
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q8_0": (0,),
    "Q2_K": (80, 82),
    "Q3_K": (108,),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
}
# The largest |code x sub-scale| of each type: what ``d`` multiplies.
_LARGEST_STEP = {
    "Q4_0": 8,
    "Q4_1": 15,
    "Q5_0": 16,
    "Q5_1": 31,
    "Q8_0": 128,
    "Q2_K": 15 * 3,
    "Q3_K": 32 * 4,
    "Q4_K": 63 * 15,
    "Q5_K": 63 * 31,
    "Q6_K": 128 * 32,
}
#: The GGML block types :func:`random_blocks` writes.
BLOCK_TYPE_NAMES = tuple(_FP16_FIELDS)


def random_blocks(shape: tuple[int, int], type_name: str, seed: int = 0, magnitude: float = 1.0):
    """``(raw, GGML type)``: random blocks of ``type_name`` for a ``[rows, cols]`` tensor.

    Every code and sub-scale byte is random; the fp16 fields (``d``, ``dmin``) are
    uniform and finite, sized so that weights stay within about ``magnitude``.
    ``gguf`` has no quantizer for K-quants, and a test of the block formats needs
    every bit pattern.
    """
    scale = magnitude / _LARGEST_STEP[type_name]
    import gguf

    qtype = gguf.GGMLQuantizationType[type_name]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (shape[0], shape[1] // block, size), dtype=np.uint8)
    for start in _FP16_FIELDS[type_name]:
        fp16 = rng.uniform(-scale, scale, raw.shape[:2] + (1,)).astype(np.float16)
        raw[..., start : start + 2] = fp16.view(np.uint8)
    return raw.reshape(shape[0], -1), qtype


def write_gguf(path: Path, arch: str, metadata: dict[str, Any], tensors: dict[str, Any]) -> Path:
    """Write a GGUF file with ``gguf.GGUFWriter`` and return its path.

    Metadata values are written by their Python type (bool, int as uint32 (int32 when
    negative, uint64 when large), float as float32, str, else an array). A tensor is a float array, or ``(raw bytes, GGML
    quantization type)`` for a quantized one.
    """
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in metadata.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int) and value < 0:
            writer.add_int32(key, value)
        elif isinstance(value, int) and value >= 1 << 32:
            writer.add_uint64(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)
    for name, value in tensors.items():
        if isinstance(value, tuple):
            data, qtype = value
            writer.add_tensor(name, data, raw_dtype=qtype)
        else:
            writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)
