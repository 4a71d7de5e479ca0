"""Elastic operations: each slices its active shape from full-size weights and has `to_static()`."""
from search_spaces.ops.attention import Attention, ElasticAttention, attention_macs
from search_spaces.ops.conv import (
                                           ElasticConv2d,
                                           ElasticDepthwiseConv2d,
                                           conv_macs,
                                           conv_params,
)
from search_spaces.ops.layernorm import ElasticLayerNorm
from search_spaces.ops.linear import ElasticLinear, linear_macs
from search_spaces.ops.norm import ElasticBatchNorm2d
from search_spaces.ops.se import (
                                           ElasticSqueezeExcite,
                                           SqueezeExcite,
                                           se_reduced_channels,
)
from search_spaces.ops.source import SharedTensor, WeightSource, set_source
from search_spaces.ops.transformer import (
                                           Block,
                                           ElasticBlock,
                                           ElasticMlp,
                                           ElasticPatchEmbed,
                                           Mlp,
                                           PatchEmbed,
                                           TokenPool,
                                           mlp_hidden,
)
from search_spaces.ops.util import conv_output_size, make_divisible

__all__ = [
    "Attention", "Block", "ElasticAttention", "ElasticBatchNorm2d", "ElasticBlock", "ElasticConv2d",
    "ElasticDepthwiseConv2d", "ElasticLayerNorm", "ElasticLinear", "ElasticMlp", "ElasticPatchEmbed",
    "ElasticSqueezeExcite", "Mlp", "PatchEmbed", "SharedTensor", "SqueezeExcite", "TokenPool",
    "WeightSource", "attention_macs", "conv_macs", "conv_output_size", "conv_params", "linear_macs",
    "make_divisible", "mlp_hidden", "se_reduced_channels", "set_source",
]
