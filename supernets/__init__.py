"""Training strategies: samplers, distillation losses and the strategies composing them."""
from supernets import distill, one_shot, samplers  # noqa: F401
