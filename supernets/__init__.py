"""Training strategies: samplers, distillation losses and the strategies composing them."""
from supernets import (  # noqa: F401
    alpha_divergence, attentive, distill, few_shot, one_shot, pada, progressive_shrinking, samplers, shiftnas)
