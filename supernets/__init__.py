"""Training strategies: samplers, distillation losses and the strategies composing them."""
from supernets import alpha_divergence, distill, one_shot, samplers  # noqa: F401
