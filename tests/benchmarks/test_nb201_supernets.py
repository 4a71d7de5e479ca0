"""benchmarks.nb201_supernets: the fixed sample, the grading of a supernet against the table, and
the seed methods' commands."""
from __future__ import annotations

import csv
import json
import random
from types import SimpleNamespace

import pytest
from scipy import stats

from benchmarks import nb201_supernets as bench
from benchmarks.nb201_data import TABLE, paper_space
from nas.core.arch import arch_id
from nas.core.errors import NasError
from nas.engine.run_dir import RunDir
from search_spaces.cell201 import to_nb201_string

SETTINGS = {"step": 7, "val_images": 100, "bn_recal_batches": 2}


# a user's clone has no shared data: these tests skip there, naming the missing file
needs_table = pytest.mark.skipif(not TABLE.is_file(), reason=f"the shared NAS-Bench-201 table is absent ({TABLE})")


@pytest.fixture(scope="module")
def space():
    return paper_space()


@pytest.fixture(scope="module")
def sample(space):
    return bench.draw_sample(space)


def test_the_sample_is_reproducible_distinct_networks_and_the_committed_one(space, sample):
    again = bench.draw_sample(space)
    assert [arch_id(a) for a in again] == [arch_id(a) for a in sample]
    assert len({arch_id(a) for a in sample}) == len(sample) >= 500
    assert all(space.canonical(a) == a for a in sample)            # dead edges already merged
    other = bench.draw_sample(space, seed=1)
    assert {arch_id(a) for a in other} != {arch_id(a) for a in sample}
    committed = bench.read_sample(space)
    assert [arch_id(a) for a in committed] == [arch_id(a) for a in sample]


def test_a_missing_or_other_sample_file_is_one_line(space, sample, tmp_path):
    with pytest.raises(NasError, match="nb201_supernets sample"):
        bench.read_sample(space, tmp_path / "absent.csv")
    bench.write_sample(sample[:499] + [sample[0]], tmp_path / "other.csv")
    with pytest.raises(NasError, match="--out: .*other.csv is not the draw of seed 0 and size 500"):
        bench.main(["sample", "--check", "--out", str(tmp_path / "other.csv")])


def planted_table(archs, seed: int = 0) -> dict[str, float]:
    rng = random.Random(seed)
    return {arch_id(a): round(rng.uniform(80, 94), 2) for a in archs}


def test_a_planted_supernet_equal_to_the_table_ranks_it_at_tau_one(sample, tmp_path):
    archs = sample[:60]
    table = planted_table(archs)
    out = tmp_path / "supernet_planted.csv"
    values = bench.grade_archs(archs, lambda a: table[arch_id(a)] / 100, out, SETTINGS, progress=False)
    report = bench.rank_report(values, table, {})
    assert report["supernet"]["kendall"]["value"] == 1.0 and report["supernet"]["spearman"]["value"] == 1.0
    assert report["supernet"]["kendall"]["interval"] == [1.0, 1.0] and report["supernet"]["archs"] == 60
    assert report["zero_cost_missing"] == 60
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["arch"] for r in rows] == [to_nb201_string(a) for a in archs]


def test_grading_resumes_from_its_file_and_refuses_other_settings(sample, tmp_path):
    archs = sample[:10]
    out = tmp_path / "supernet_run.csv"
    measured = []

    def top1(arch):
        measured.append(arch_id(arch))
        return len(measured) / 100

    first = bench.grade_archs(archs[:4], top1, out, SETTINGS, progress=False)
    both = bench.grade_archs(archs, top1, out, SETTINGS, progress=False)
    assert measured == [arch_id(a) for a in archs]                 # the first four read back, not measured
    assert all(both[i] == first[i] for i in first)
    with pytest.raises(NasError, match="--results: .* measured with"):
        bench.grade_archs(archs, top1, out, {**SETTINGS, "val_images": 200}, progress=False)


def test_the_fusion_ranks_by_the_mean_of_the_normalised_ranks(sample):
    archs = sample[:40]
    table = planted_table(archs)
    rng = random.Random(1)
    supernet = {arch_id(a): rng.random() for a in archs}
    zero_cost = {arch_id(a): {"macs": rng.random(), "jacov": rng.random()} for a in archs}
    report = bench.rank_report(supernet, table, zero_cost)
    ids = list(supernet)
    truth = [table[i] for i in ids]
    free = [stats.rankdata([zero_cost[i][name] for i in ids]) for name in ("macs", "jacov")]
    for spec, columns in (("macs+jacov", free),
                          ("supernet+macs+jacov", [stats.rankdata([supernet[i] for i in ids]), *free])):
        expected = stats.kendalltau(sum(columns), truth).statistic     # rank sums tie: tau-b's ties count
        assert report[spec]["kendall"]["value"] == pytest.approx(expected, abs=5e-4)
        assert report[spec]["spearman"]["value"] == pytest.approx(stats.spearmanr(sum(columns), truth).statistic,
                                                                  abs=5e-4)


@needs_table
def test_a_supernet_that_reads_the_real_table_ranks_the_sample_at_tau_one(space, sample, tmp_path):
    from estimators.table import read_table

    table = read_table(f"table:{TABLE}", space)
    archs = sample[:100]
    values = bench.grade_archs(archs, lambda a: table[arch_id(a)], tmp_path / "s.csv", SETTINGS, progress=False)
    report = bench.rank_report(values, table, bench.zero_cost_scores())
    assert report["supernet"]["kendall"]["value"] == 1.0
    assert report["supernet+macs+jacov"]["kendall"]["value"] < 1.0        # the zero-cost default disagrees


def test_every_seed_method_has_a_command_of_the_cpu_config():
    lines = [bench.train_command(m, 1, "/data/cifar") for m in bench.METHODS]
    assert all(line.startswith("nas train cifar10_nb201_cpu --name nb201cpu-") for line in lines)
    assert all("data.root=/data/cifar" in line and "train.seed=1" in line for line in lines)
    assert "'strategy.sampler={name: sandwich, num_random: 2}'" in lines[1]
    shared = bench.train_command("sandwich", 0, "/data/cifar", ranks=2)
    torchrun = "OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node=2 -m nas train cifar10_nb201_cpu"
    assert shared.startswith(torchrun)
    assert shared.endswith(bench.train_command("sandwich", 0, "/data/cifar").removeprefix("nas train"))


def test_a_grading_records_how_its_run_was_trained(tmp_path, capsys):
    run = SimpleNamespace(step=3880, dir=RunDir(tmp_path))
    assert bench.training_record(run) == {"step": 3880}                     # a run without the file
    bench.print_report("r", {"training": {"step": 3880, "threads": 1}})
    assert "with unrecorded ranks of 1 thread(s)" in capsys.readouterr().out
    run.dir.environment.write_text(json.dumps({"threads": 1, "ranks": 2, "git_commit": "817cacd8c8"}))
    record = bench.training_record(run)
    assert record == {"step": 3880, "threads": 1, "ranks": 2, "git_commit": "817cacd8c8"}
    bench.print_report("r", {"training": record})
    assert capsys.readouterr().out.strip() == "trained to step 3880 with 2 rank(s) of 1 thread(s) at commit 817cacd"
    bench.print_report("r", {"training": {**record, "earlier_starts": [{"ranks": 1, "git_commit": "950a91a0"}]}})
    assert capsys.readouterr().out.strip().endswith("at commit 817cacd (resumed; earlier starts: 1 rank(s) at "
                                                     "commit 950a91a)")
    bench.print_report("ceiling", {})                   # a report of no run says nothing of training
    assert capsys.readouterr().out == ""


def test_commands_refuse_a_number_of_ranks_below_one():
    with pytest.raises(NasError, match="--ranks: 0 is not a number of processes"):
        bench.main(["commands", "--ranks", "0"])


@pytest.mark.slow
@needs_table
def test_the_ceiling_trains_sample_archs_alone_and_ranks_them_against_the_table(tmp_path):
    from tests.support.fake_data import write_png_tree

    write_png_tree(tmp_path / "tree", train_per_class=8, val_per_class=2)
    figures = bench.main(["ceiling", "--images", str(tmp_path / "tree"), "--archs", "3", "--epochs", "1",
                          "--ground-truth", str(tmp_path / "truth"), "--out", str(tmp_path / "c.csv"),
                          "--set", "data.val_size=6",
                          "data.train_size=null", "train.batch_size=8", "data.in_memory=true"])
    assert figures["steps"] == 2 and len(figures["archs"]) == 3        # 18 images: two full batches of 8
    sample = bench.read_sample(paper_space())[:3]
    assert [a["arch"] for a in figures["archs"]] == [to_nb201_string(a) for a in sample]
    assert all(0 <= a["test_top1"] <= 1 for a in figures["archs"])
    assert -1 <= figures["kendall"]["value"] <= 1 and len(list((tmp_path / "truth").rglob("*-s0.json"))) == 3
    with (tmp_path / "c.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["arch"] for r in rows] == [a["arch"] for a in figures["archs"]]
    assert [float(r["alone_test_top1"]) for r in rows] == pytest.approx([a["test_top1"] for a in figures["archs"]], abs=1e-6)
    assert [float(r["table_top1"]) for r in rows] == [a["table_top1"] for a in figures["archs"]]
    assert {r["steps"] for r in rows} == {"2"}
    later = bench.main(["ceiling", "--images", str(tmp_path / "tree"), "--start", "1", "--archs", "3", "--epochs", "1",
                        "--ground-truth", str(tmp_path / "truth"), "--set", "data.val_size=6",
                        "data.train_size=null", "train.batch_size=8", "data.in_memory=true"])
    assert later["archs"] == figures["archs"][1:]                      # read back from the same cache
    with pytest.raises(NasError, match="--start: 3 leaves no arch of the first --archs 3"):
        bench.main(["ceiling", "--images", str(tmp_path / "tree"), "--start", "3", "--archs", "3"])


def test_beside_ceiling_ranks_the_ceilings_archs_by_every_complete_grading(sample, tmp_path):
    archs = sample[:12]
    ids = [arch_id(a) for a in archs]
    table = planted_table(archs, seed=3)
    rng = random.Random(2)
    alone = {i: rng.random() for i in ids}
    with (tmp_path / "ceiling.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(bench.CEILING_COLUMNS)
        writer.writerows([i, to_nb201_string(a), alone[i], table[i], 5] for i, a in zip(ids, archs))
    bench.grade_archs(archs, lambda a: -table[arch_id(a)], tmp_path / "supernet_reversed.csv", SETTINGS,
                      progress=False)
    bench.grade_archs(archs[:5], lambda a: 0.5, tmp_path / "supernet_partial.csv", SETTINGS, progress=False)
    macs, jacov = [rng.random() for _ in ids], [rng.random() for _ in ids]
    with (tmp_path / "scores_sample_b0_i0.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["arch_id", "arch", "macs", "jacov"])
        writer.writerows([i, to_nb201_string(a), m, j] for i, a, m, j in zip(ids, archs, macs, jacov))
    report = bench.main(["beside-ceiling", "--ceiling", str(tmp_path / "ceiling.csv"), "--folder", str(tmp_path)])
    rows = (tmp_path / "ceiling.csv").read_text().splitlines()
    (tmp_path / "first.csv").write_text("\n".join(rows[:6]) + "\n")
    (tmp_path / "rest.csv").write_text("\n".join(rows[:1] + rows[6:]) + "\n")
    assert bench.main(["beside-ceiling", "--ceiling", str(tmp_path / "first.csv"), str(tmp_path / "rest.csv"),
                       "--folder", str(tmp_path)])["alone"] == report["alone"]
    truth = [table[i] for i in ids]
    assert report["archs"] == 12
    assert report["alone"]["kendall"]["value"] == pytest.approx(
        stats.kendalltau([alone[i] for i in ids], truth).statistic, abs=5e-4)
    assert report["runs"]["reversed"]["kendall"]["value"] == -1.0 and report["incomplete"] == ["partial"]
    rank_sum = stats.rankdata(macs) + stats.rankdata(jacov)
    assert report["macs+jacov"]["kendall"]["value"] == pytest.approx(stats.kendalltau(rank_sum, truth).statistic,
                                                                     abs=5e-4)
    assert report["macs"]["kendall"]["value"] == pytest.approx(stats.kendalltau(macs, truth).statistic, abs=5e-4)
    with pytest.raises(NasError, match="--ceiling: .*absent.csv is not a file"):
        bench.beside_ceiling([tmp_path / "ceiling.csv", tmp_path / "absent.csv"], tmp_path)
    with pytest.raises(NasError, match="--ceiling: no ceiling file given"):
        bench.beside_ceiling([], tmp_path)


def test_a_spread_subset_keeps_the_best_arch_of_each_nonempty_interval():
    table = {"a": 10.0, "b": 10.1, "c": 50.0, "d": 90.0, "e": 89.9}
    assert bench.spread_subset(table, 4) == ["b", "c", "d"]           # slices of 20 points: 10-30, 50-70, 70-90
    assert bench.spread_subset(table, 1) == ["d"]
    assert sorted(bench.spread_subset(table, 1000)) == sorted(table)


@needs_table
def test_populations_grade_each_subset_of_the_sample(space, sample, tmp_path):
    from estimators.table import read_table

    table = read_table(f"table:{TABLE}", space)
    bench.grade_archs(sample, lambda a: table[arch_id(a)], tmp_path / "supernet_planted.csv", SETTINGS,
                      progress=False)
    bench.grade_archs(sample, lambda a: -table[arch_id(a)], tmp_path / "supernet_reversed.csv", SETTINGS,
                      progress=False)
    bench.grade_archs(sample[:9], lambda a: 0.5, tmp_path / "supernet_partial.csv", SETTINGS, progress=False)
    report = bench.main(["populations", "--intervals", "50", "--folder", str(tmp_path)])
    on_sample = {arch_id(a): table[arch_id(a)] for a in sample}
    assert report["archs"] == {"all": len(sample), "spread50": len(bench.spread_subset(on_sample, 50)),
                               "top half": len(sample) - len(sample) // 2}
    assert set(report["kendall"]) == {"planted", "reversed"}                  # the partial grading is left out
    assert {row["value"] for row in report["kendall"]["planted"].values()} == {1.0}
    assert {row["value"] for row in report["kendall"]["reversed"].values()} == {-1.0}


def test_an_agreement_no_resample_defines_has_no_interval():
    tied = bench.agreement([0.5, 0.5, 0.5], [80.0, 85.0, 90.0])          # tau-b is undefined on constant scores
    assert tied["kendall"]["interval"] is None and tied["archs"] == 3
    assert bench.agreement([1.0, 2.0, 3.0], [80.0, 85.0, 90.0])["kendall"]["value"] == 1.0
