"""Small GGUF files written with the ``gguf`` package, for tests (test-only dependency)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_gguf(path: Path, arch: str, metadata: dict[str, Any], tensors: dict[str, Any]) -> Path:
    """Write a GGUF file with ``gguf.GGUFWriter`` and return its path.

    Metadata values are written by their Python type (bool, int as uint32, float as
    float32, str, else an array). A tensor is a float array, or ``(raw bytes, GGML
    quantization type)`` for a quantized one.
    """
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in metadata.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
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
