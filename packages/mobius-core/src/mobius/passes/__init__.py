"""Graph passes applied after the weights: quantization and runtime-specific rewrites."""

from mobius.passes._int4 import dequantize_blocks, quantize_blocks
from mobius.passes._int4_pass import quantize_int4

__all__ = ["dequantize_blocks", "quantize_blocks", "quantize_int4"]
