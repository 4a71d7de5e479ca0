"""Elastic operations: each slices its active shape from full-size weights and has `to_static()`."""
from search_spaces.ops.conv import ElasticConv2d, ElasticDepthwiseConv2d, conv_macs, conv_params
from search_spaces.ops.linear import ElasticLinear, linear_macs
from search_spaces.ops.norm import ElasticBatchNorm2d
from search_spaces.ops.se import ElasticSqueezeExcite, SqueezeExcite, se_reduced_channels
from search_spaces.ops.source import SharedTensor, WeightSource, set_source
from search_spaces.ops.util import conv_output_size, make_divisible

__all__ = [
    "ElasticBatchNorm2d", "ElasticConv2d", "ElasticDepthwiseConv2d", "ElasticLinear",
    "ElasticSqueezeExcite", "SharedTensor", "SqueezeExcite", "WeightSource", "conv_macs",
    "conv_output_size", "conv_params", "linear_macs", "make_divisible", "se_reduced_channels",
    "set_source",
]
