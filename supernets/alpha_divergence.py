"""`alpha`: AlphaNet's adaptive alpha-divergence in-place distillation.

Paper: Wang et al., "AlphaNet: Improved Training of Supernets with Alpha-Divergence", ICML 2021.
With teacher p (the max subnet's detached output) and student q over K classes,

    D_a(p||q) = (sum_k p_k^a q_k^(1-a) - 1) / (a(a-1)) = sum_k q_k (w_k^a - 1) / (a(a-1)),

w_k = p_k / q_k (the importance ratio). Per example the student minimises the larger of
D(alpha_min) and D(alpha_max): alpha < 0 punishes a student that under-covers the teacher's
modes, alpha > 0 one that over-covers them. Everything is computed in log space
(`w^a = exp(a (log p - log q))`, clamped at `beta` before use), so float32 never forms
0 * log 0, 0/0 or 0 * inf, even when some student probabilities underflow.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from nas.core.errors import ConfigError
from nas.core.registry import DISTILL_LOSSES
from supernets.distill import DistillLoss

# |a - 1| or |a| below this uses the closed-form limits (KL(p||q), KL(q||p)) instead of the
# generic formula, whose 1/(a(a-1)) would amplify rounding errors.
LIMIT_TOLERANCE = 1e-3


def alpha_terms(log_p: torch.Tensor, log_q: torch.Tensor, alpha: float,
                beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example clipped divergence D_alpha(p||q) and its gradient surrogate.

    Args:
        log_p: Teacher log-probabilities, (N, K); no gradient flows into them.
        log_q: Student log-probabilities, (N, K), with the graph to the student.
        alpha: The divergence order (any real number; values near 0 and 1 use the limits).
        beta: Cap on the importance weights `w^alpha` (`inf`: no clipping).

    Returns:
        `(divergence, surrogate)`, each of shape (N,). The divergence carries no gradient;
        the surrogate `-sum_k sg(q_k rho_k) log q_k` has the divergence's gradient w.r.t. the
        student logits (exactly when nothing is clipped; the clipped gradient otherwise).
    """
    log_p = log_p.detach()
    log_q_sg = log_q.detach()
    log_w = log_p - log_q_sg
    log_beta = math.log(beta)                          # inf for beta = inf: nothing clipped
    if abs(alpha - 1.0) < LIMIT_TOLERANCE:             # KL(p||q); unclipped as in AlphaNet
        p = log_p.exp()
        divergence = (p * log_w).sum(1)
        weight = p                                      # q * rho with rho = w
    elif abs(alpha) < LIMIT_TOLERANCE:                 # KL(q||p) with w clipped to [0, beta]
        q = log_q_sg.exp()
        log_w_clipped = log_w.clamp(max=log_beta)
        divergence = -(q * log_w_clipped).sum(1)
        weight = q * (log_w_clipped - 1.0)              # q * rho with rho = log w - 1
    else:
        scale = alpha * (alpha - 1.0)
        log_wa = (alpha * log_w).clamp(max=log_beta)   # log min(w^a, beta)
        q_wa = (log_q_sg + log_wa).exp()                # q * min(w^a, beta), never 0 * inf
        q = log_q_sg.exp()
        divergence = (q_wa - q).sum(1) / scale
        # rho = min(w^a, beta) / a + 1 / (a(a-1)); the constant is a zero-mean baseline
        # (sum_k q_k grad log q_k = 0) that keeps the surrogate's scale comparable to D.
        weight = q_wa / alpha + q / scale
    surrogate = -(weight * log_q).sum(1)
    return divergence, surrogate


@dataclass(frozen=True)
class AlphaOptions:
    alpha_min: float = -1.0   # negative side: penalises a student that under-estimates uncertainty
    alpha_max: float = 1.0    # positive side (1: KL(p||q), never clipped)
    beta: float = 5.0         # cap on importance weights w^alpha; YAML `.inf` turns clipping off

    def __post_init__(self) -> None:
        problems = []
        if not self.alpha_min < self.alpha_max:
            problems.append(f"alpha_min: must be < alpha_max ({self.alpha_max}), got {self.alpha_min}")
        if not self.beta > 1.0:
            problems.append(f"beta: must be > 1 (or .inf), got {self.beta}")
        for key in ("alpha_min", "alpha_max"):
            if not math.isfinite(getattr(self, key)):
                problems.append(f"{key}: must be finite, got {getattr(self, key)}")
        if problems:
            raise ConfigError(problems)


@DISTILL_LOSSES.register("alpha", options=AlphaOptions)
class AdaptiveAlphaDivergence(DistillLoss):
    """Per example the larger of D(alpha_min) and D(alpha_max); returns the surrogate's mean.

    Logs `divergence` (batch mean of the per-example larger clipped divergence: the quantity
    minimised, unlike the surrogate, whose value is not a divergence) and `alpha_min_share`
    (the fraction of examples where the alpha_min side was the larger).
    """

    def __call__(self, student, teacher, labels):
        o = self.options
        dtype = torch.promote_types(student.dtype, torch.float32)   # float64 stays float64 (tests)
        log_p = F.log_softmax(teacher.detach().to(dtype), dim=1)
        log_q = F.log_softmax(student.to(dtype), dim=1)
        d_low, s_low = alpha_terms(log_p, log_q, o.alpha_min, o.beta)
        d_high, s_high = alpha_terms(log_p, log_q, o.alpha_max, o.beta)
        use_low = d_low > d_high
        loss = torch.where(use_low, s_low, s_high).mean()
        divergence = torch.where(use_low, d_low, d_high).mean()
        return loss, {"divergence": divergence.item(), "alpha_min_share": use_low.float().mean().item()}
