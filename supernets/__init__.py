"""Training strategies: samplers, distillation losses and the strategies composing them."""
from supernets import alpha_divergence, attentive, distill, few_shot, one_shot, pada, samplers, shiftnas  # noqa: F401
