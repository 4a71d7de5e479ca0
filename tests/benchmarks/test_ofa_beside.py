"""benchmarks/ofa_beside.py: nas and OFA's own code built alike, the arch mapping, and a tiny run."""
from __future__ import annotations

import importlib.util
import random

import pytest
import torch

from benchmarks import ofa_beside

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ofa") is None,
                                reason="needs the ofa package (Once-for-All's code: pip install ofa)")


def test_an_arch_maps_to_ofas_per_block_lists_in_block_order():
    space, _ = ofa_beside.nas_space(None, 128)
    arch = space.sample(random.Random(4))
    mapped = ofa_beside.ofa_arch(arch)
    assert len(mapped["ks"]) == len(mapped["e"]) == 20 and len(mapped["d"]) == 5
    # OFA's block n (1-20) is nas's stage, block = divmod(n - 1, 4) + (1, 0)
    for n in range(1, 21):
        stage, block = divmod(n - 1, 4)
        assert mapped["ks"][n - 1] == arch[f"stage{stage + 1}.block{block}.kernel_size"]
        assert mapped["e"][n - 1] == arch[f"stage{stage + 1}.block{block}.expand_ratio"]
    assert mapped["d"] == [arch[f"stage{i}.depth"] for i in range(1, 6)]


@pytest.mark.slow
def test_a_tiny_run_times_both_engines_on_the_same_subnets(capsys):
    torch.set_num_threads(1)
    record = ofa_beside.main(["--tiny", "--threads", "1", "--layouts", "nchw"])
    out = capsys.readouterr().out
    assert "median nas/ofa over 2 subnets" in out and "peak RSS" in out
    rows = record["nchw"]["subnets"]
    assert set(rows) == {"max", "min"}
    for row in rows.values():
        # the extracted subnets have equal parameter counts: the mapping built the same network in both
        assert row["params"]["nas"] == row["params"]["ofa"] > 0
        for what in ("step", "extract", "infer"):
            assert row[what]["ratio"] == pytest.approx(row[what]["nas_ms"] / row[what]["ofa_ms"], rel=1e-3)
    assert rows["max"]["params"]["nas"] > rows["min"]["params"]["nas"]
    memory = record["peak_rss_bytes"]["nchw"]
    assert all(memory[engine]["max_rss"] >= memory[engine]["added"] > 0 for engine in ("nas", "ofa"))
