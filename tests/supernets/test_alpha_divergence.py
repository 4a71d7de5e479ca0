"""The adaptive alpha-divergence loss: its invariants (zero at p = q, limits, symmetry, gradients)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from nas.core import yaml_io
from nas.core.config import load_config
from nas.core.errors import ConfigError
from supernets.alpha_divergence import (
    AdaptiveAlphaDivergence,
    AlphaOptions,
    alpha_terms,
)

INF = math.inf


def _logits(seed: int, n: int = 6, k: int = 10, scale: float = 2.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(n, k, generator=generator, dtype=torch.float64) * scale).requires_grad_()


def _divergence(teacher, student, alpha, beta=INF) -> torch.Tensor:
    return alpha_terms(F.log_softmax(teacher, 1), F.log_softmax(student, 1), alpha, beta)[0]


def _closed_form(teacher, student, alpha) -> torch.Tensor:
    """(sum_k p^a q^(1-a) - 1) / (a(a-1)), or the KL limits, with autograd through both."""
    log_p, log_q = F.log_softmax(teacher, 1), F.log_softmax(student, 1)
    if alpha == 1:
        return (log_p.exp() * (log_p - log_q)).sum(1)
    if alpha == 0:
        return (log_q.exp() * (log_q - log_p)).sum(1)
    return ((alpha * log_p + (1 - alpha) * log_q).exp().sum(1) - 1) / (alpha * (alpha - 1))


@pytest.mark.parametrize("alpha", [-1.0, -0.5, 0.0, 0.5, 1.0, 2.0])
def test_divergence_of_a_distribution_with_itself_is_zero(alpha):
    p = _logits(0)
    assert torch.allclose(_divergence(p, p, alpha, beta=5.0), torch.zeros(6, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("alpha", [-1.0, -0.5, 0.5, 2.0])
def test_divergence_is_positive_for_different_distributions_and_matches_the_closed_form(alpha):
    teacher, student = _logits(0), _logits(1)
    values = _divergence(teacher, student, alpha)
    assert (values > 1e-3).all()
    assert torch.allclose(values, _closed_form(teacher, student, alpha), rtol=1e-12)


def test_alpha_one_and_zero_are_the_two_kl_divergences_and_the_generic_formula_tends_to_them():
    teacher, student = _logits(0, scale=1.0), _logits(1, scale=1.0)
    kl_pq, kl_qp = _closed_form(teacher, student, 1), _closed_form(teacher, student, 0)
    assert torch.allclose(_divergence(teacher, student, 1.0), kl_pq, rtol=1e-12)
    assert torch.allclose(_divergence(teacher, student, 0.0), kl_qp, rtol=1e-12)
    for alpha in (0.99, 1.01):
        assert torch.allclose(_divergence(teacher, student, alpha), kl_pq, rtol=1e-2)
    for alpha in (-0.01, 0.01):
        assert torch.allclose(_divergence(teacher, student, alpha), kl_qp, rtol=1e-2)


@pytest.mark.parametrize("alpha", [-1.0, -0.5, 0.0, 0.3, 2.0])
def test_symmetry_d_alpha_p_q_equals_d_one_minus_alpha_q_p(alpha):
    p, q = _logits(0), _logits(1)
    assert torch.allclose(_divergence(p, q, alpha), _divergence(q, p, 1.0 - alpha), rtol=1e-10)


@pytest.mark.parametrize("alpha", [-1.0, -0.5, 0.0, 0.5, 1.0, 2.0])
def test_surrogate_gradient_equals_the_divergence_gradient_in_float64(alpha):
    teacher, student = _logits(0), _logits(1)
    _, surrogate = alpha_terms(F.log_softmax(teacher, 1), F.log_softmax(student, 1), alpha, INF)
    (grad_surrogate,) = torch.autograd.grad(surrogate.sum(), student)
    (grad_exact,) = torch.autograd.grad(_closed_form(teacher.detach(), student, alpha).sum(), student)
    torch.testing.assert_close(grad_surrogate, grad_exact, rtol=1e-6, atol=1e-12)


def test_adaptive_loss_follows_the_larger_divergence_and_the_teacher_gets_no_gradient():
    teacher, student = _logits(0), _logits(1, scale=3.0)
    loss_fn = AdaptiveAlphaDivergence(AlphaOptions(alpha_min=-1.0, alpha_max=1.0, beta=INF))
    loss, logs = loss_fn(student, teacher, torch.zeros(6, dtype=torch.long))
    loss.backward()
    assert teacher.grad is None
    d_low = _closed_form(teacher.detach(), student, -1.0)
    d_high = _closed_form(teacher.detach(), student, 1.0)
    larger = torch.where(d_low > d_high, d_low, d_high)
    assert 0 < logs["alpha_min_share"] < 1                  # both sides chosen in this batch
    assert logs["divergence"] == pytest.approx(larger.mean().item(), rel=1e-12)
    (expected,) = torch.autograd.grad(larger.mean(), student)
    torch.testing.assert_close(student.grad, expected, rtol=1e-6, atol=1e-12)


def test_clipping_bounds_the_negative_alpha_side():
    teacher, student = _logits(0, scale=4.0), _logits(1, scale=4.0)
    clipped, unclipped = _divergence(teacher, student, -1.0, 5.0), _divergence(teacher, student, -1.0)
    assert (clipped <= unclipped + 1e-12).all() and (clipped < unclipped).any()
    # q * min(q/p, 5) summed is at most 5, so D_-1 <= (5 - 1) / 2.
    assert (clipped <= 2.0 + 1e-12).all()


def test_values_and_gradients_stay_finite_when_student_probabilities_underflow():
    student = torch.zeros(4, 10)
    student[:, 5:] = -300.0                     # exp(-300) underflows to 0 in float32
    student.requires_grad_()
    teacher = torch.zeros(4, 10)
    teacher[:, :5] = -300.0                     # the teacher puts its mass where the student has none
    loss, logs = AdaptiveAlphaDivergence(AlphaOptions())(student, teacher, torch.zeros(4, dtype=torch.long))
    loss.backward()
    assert math.isfinite(loss.item()) and math.isfinite(logs["divergence"])
    assert torch.isfinite(student.grad).all() and student.grad.abs().sum() > 0
    for alpha in (-1.0, 0.0, 0.5, 1.0, 2.0):
        values, surrogate = alpha_terms(F.log_softmax(teacher, 1), F.log_softmax(student, 1), alpha, 5.0)
        assert torch.isfinite(values).all() and torch.isfinite(surrogate).all(), alpha


def test_options_are_validated_and_inf_beta_round_trips_through_yaml(tmp_path):
    with pytest.raises(ConfigError, match="alpha_min: must be < alpha_max"):
        AlphaOptions(alpha_min=1.0, alpha_max=1.0)
    with pytest.raises(ConfigError, match="beta: must be > 1"):
        AlphaOptions(beta=1.0)
    with pytest.raises(ConfigError, match=r"strategy\.distill\.options\.beta: must be > 1"):
        load_config({"space": "mobilenetv3", "strategy": {"distill": {"name": "alpha", "beta": 0.5}}})
    path = tmp_path / "run.yaml"
    path.write_text("space: mobilenetv3\nstrategy:\n  distill: {name: alpha, beta: .inf}\n")
    config = load_config(str(path))
    assert config.strategy.distill.options.beta == INF
    saved = tmp_path / "saved.yaml"
    saved.write_text(yaml_io.dumps(config.to_dict()))
    assert load_config(str(saved)) == config
