"""benchmarks/nb201_scores.py and nb201_proxies.py: the per-arch score files, resumed and merged, and
the default score chosen on NASLib's archs and graded on the random ones."""
from __future__ import annotations

import random

import pytest

from benchmarks.nb201_data import NASLIB_FILE, TABLE, paper_space
from benchmarks.nb201_proxies import choose_default, read_scores
from benchmarks.nb201_scores import PROXIES, benchmark_archs, done_ids
from nas.core.arch import arch_id
from nas.engine.fidelity.rank_stats import spearman_rho


def _write(path, rows):
    path.write_text("arch_id,arch,source," + ",".join(PROXIES) + "\n" + "".join(rows))


def test_score_files_skip_an_unfinished_row_and_merge_by_arch(tmp_path):
    full = ",".join("1" for _ in PROXIES)
    _write(tmp_path / "a.csv", [f"a1,|x|,naslib,{full}\n", f"a2,|y|,random,{full}\n",
                                "a3,|z|,random," + ",".join("2" for _ in PROXIES[:-1]) + ",\n"])   # killed mid-row
    _write(tmp_path / "b.csv", ["a2,|y|,random," + ",".join("5" for _ in PROXIES) + "\n"])
    assert done_ids(tmp_path / "a.csv") == {"a1", "a2"}
    merged = read_scores([tmp_path / "a.csv", tmp_path / "b.csv"])
    assert set(merged) == {"a1", "a2"} and merged["a2"]["jacov"] == 5.0 and merged["a1"]["source"] == "naslib"


def test_the_default_is_chosen_on_naslib_s_archs_and_graded_on_the_random_ones():
    rng = random.Random(0)
    table, scores = {}, {}
    for n in range(60):
        key, accuracy = f"x{n:02d}", rng.uniform(80, 94)
        table[key] = accuracy
        row = {p: rng.random() for p in PROXIES}
        row["macs"] = accuracy + rng.gauss(0, 3)      # informative, noisy
        row["jacov"] = accuracy if n < 30 else -accuracy   # perfect on the CHOOSE half only
        scores[key] = {"arch": key, "source": "naslib" if n < 30 else "random", **row}
    result = choose_default(scores, table)
    assert (result["choose"], result["report"]) == (30, 30) and result["chosen"] == "jacov"
    chosen = result["candidates"]["jacov"]
    assert chosen["choose_spearman"] == 1.0
    report = [k for k in sorted(scores) if scores[k]["source"] == "random"]
    assert chosen["report_spearman"]["value"] == pytest.approx(
        round(spearman_rho([scores[k]["jacov"] for k in report], [table[k] for k in report]), 3)) == -1.0


@pytest.mark.skipif(not (NASLIB_FILE.is_file() and TABLE.is_file()),
                    reason=f"NAS-Bench-201 reference data absent ({NASLIB_FILE.parent}): a user's clone has none")
def test_the_benchmark_s_archs_are_naslib_s_then_distinct_random_others():
    space = paper_space()
    archs = benchmark_archs(space, 20, seed=3)
    ids = [arch_id(a) for _, a in archs]
    naslib = [i for (source, _), i in zip(archs, ids) if source == "naslib"]
    drawn = [i for (source, _), i in zip(archs, ids) if source == "random"]
    assert len(set(ids)) == len(ids) and len(drawn) == 20 and not set(drawn) & set(naslib)
    assert all(space.canonical(a) == a for _, a in archs)
    assert [arch_id(a) for _, a in benchmark_archs(space, 20, seed=3)] == ids          # seeded


def test_the_default_answer_is_graded_among_the_archs_within_its_budget():
    from benchmarks.nb201_default_answer import budget_accuracies, percentile

    table, macs = {"a": 90.0, "b": 92.0, "c": 94.0, "d": 93.0}, {"a": 10, "b": 20, "c": 40, "d": 30}
    within = budget_accuracies(table, macs, 30)
    assert sorted(within) == [90.0, 92.0, 93.0] and len(budget_accuracies(table, macs, None)) == 4
    assert percentile(92.0, within) == pytest.approx(200 / 3) and percentile(93.0, within) == 100.0
