"""Channel rounding shared by the spaces (the same rule timm applies)."""
from __future__ import annotations


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None,
                   round_limit: float = 0.9) -> int:
    """Round `value` to a multiple of `divisor`, never dropping more than 10% below it."""
    min_value = min_value if min_value is not None else divisor
    rounded = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if rounded < round_limit * value:
        rounded += divisor
    return rounded


def conv_output_size(size: int, kernel_size: int, stride: int) -> int:
    """Spatial output size of a convolution/pooling with `kernel_size // 2` padding."""
    padding = kernel_size // 2
    return (size + 2 * padding - kernel_size) // stride + 1
