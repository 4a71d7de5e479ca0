"""benchmarks/family_finetune.py: a member's anchor on the min-max line and what it lost against it."""
from __future__ import annotations

import pytest

from benchmarks.family_finetune import anchor, member_figures


def test_the_anchor_is_the_straight_line_through_the_min_and_max_subnets():
    low, high = (1_000_000, 0.90), (5_000_000, 0.94)
    assert anchor(1_000_000, low, high) == pytest.approx(0.90)
    assert anchor(5_000_000, low, high) == pytest.approx(0.94)
    assert anchor(2_000_000, low, high) == pytest.approx(0.91)


def test_a_member_loss_is_its_anchor_minus_its_inherited_val_top1_in_points():
    member = {"arch_id": "m", "macs": 3_000_000}
    shipped = {"inherited": {"val_top1": 0.905, "test_top1": 0.90}}
    row = member_figures(member, shipped, (1_000_000, 0.90), (5_000_000, 0.94))
    assert row == {"arch_id": "m", "macs": 3_000_000, "inherited_val": 0.905, "inherited_test": 0.90,
                   "anchor_val": 0.92, "loss_points": 1.5}
