"""Latency tables fitted from whole-network timings, per-arch timing tables, and their errors."""
from __future__ import annotations

import csv
import dataclasses
import json
import random
import re
import shutil

import numpy as np
import pytest
from scipy.stats import spearmanr

from nas import cli
from nas.core import yaml_io
from nas.core.arch import arch_id
from nas.core.errors import ConfigError, SearchError
from nas.engine.latency.fit import fit_table, load_priors
from nas.engine.latency.measure import DeviceRecord
from nas.engine.latency.sources import load_latency_source
from nas.engine.latency.table import LatencyTable
from nas.engine.latency.timings import read_timings
from nas.engine.searching.costs import Constraints
from nas.engine.searching.loop import run_search
from nas.engine.searching.request import SearchRequest
from search_spaces.cell201 import to_nb201_string
from tests.conftest import make_space
from tests.support.tiny import tiny_config
from tests.searchers.stub import StubEvaluator

NOISE = 0.02


@pytest.fixture(scope="module")
def space():
    return make_space("cell201", small=True)      # 5 operations: 4 layer groups + a constant


@pytest.fixture(scope="module")
def three_ops():
    """729 raw archs: a search lists them in a moment."""
    return make_space("cell201", small=True, operations=("none", "skip_connect", "conv_1x1"))


_KEYS: dict[str, list[str]] = {}     # space fingerprint -> every layer key of its archs (listing takes seconds)


def planted_costs(space, seed: int = 0, scale: float = 1.0) -> tuple[dict[str, float], float]:
    """A cost per layer key (different per stage and operation) and a constant, in ms."""
    rng = random.Random(seed)
    if space.fingerprint() not in _KEYS:
        _KEYS[space.fingerprint()] = sorted({layer.key for arch in space.enumerate() for layer in space.layers(arch)})
    keys = _KEYS[space.fingerprint()]
    return {key: scale * rng.uniform(0.05, 1.0) for key in keys}, scale * 1.5


def planted_ms(space, arch, costs: dict[str, float], constant: float) -> float:
    return constant + sum(costs[layer.key] for layer in space.layers(arch))


def write_timings(path, rows: list[tuple[str, object]], column: str = "latency_ms"):
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["arch", column])
        writer.writerows(rows)
    return path


def timed_archs(space, count: int, seed: int) -> list[dict]:
    rng, archs = random.Random(seed), {}
    while len(archs) < count:
        arch = space.sample(rng)
        archs[arch_id(arch)] = arch
    return list(archs.values())


def planted_file(space, path, count: int, seed: int = 1, scale: float = 1.0, noise: float = NOISE,
                 cost_seed: int = 0):
    """`count` archs timed by the planted model with multiplicative noise, half as NAS-Bench-201 strings."""
    costs, constant = planted_costs(space, cost_seed, scale)
    rng = random.Random(seed + 100)
    rows = []
    for i, arch in enumerate(timed_archs(space, count, seed)):
        ms = planted_ms(space, arch, costs, constant) * (1 + rng.gauss(0, noise))
        rows.append((to_nb201_string(arch) if i % 2 else json.dumps(arch), f"{ms:.6f}"))
    return write_timings(path, rows), costs, constant


def held_out(space, timed: list[dict], count: int = 300) -> list[dict]:
    seen = {arch_id(a) for a in timed}
    return [a for a in timed_archs(space, count + len(timed), seed=7) if arch_id(a) not in seen][:count]


def test_a_planted_additive_latency_is_recovered_from_a_few_timings(space, tmp_path):
    path, costs, constant = planted_file(space, tmp_path / "t.csv", 12)
    timings = read_timings(path, space)
    table, report = fit_table(space, timings, device="phone")
    others = held_out(space, timings.archs)
    truth = np.array([planted_ms(space, a, costs, constant) for a in others])
    predicted = np.array([table.predict(space, a) for a in others])
    assert spearmanr(predicted, truth)[0] >= 0.98
    assert np.mean(np.abs(predicted - truth) / truth) < 0.03
    # the report's held-out figures are those of the per-timing predictions it stores
    heldout = np.array([row["heldout_ms"] for row in table.fit])
    measured = np.array(timings.ms)
    assert report.heldout_mape_pct == pytest.approx(100 * np.mean(np.abs(heldout - measured) / measured), abs=1e-3)
    assert report.heldout_spearman == pytest.approx(spearmanr(heldout, measured)[0], abs=1e-4)
    assert report.heldout_mape_pct < 5 and report.free_costs == 5 and report.timings == 12
    # a table like a measured one: every layer key of the space, the device named by the user
    assert set(table.entries) == set(costs) and table.device.device == "phone" and not table.measurable
    saved = LatencyTable.load(table.save(tmp_path / "fit.json"))
    assert saved.fitted["file"] == str(path) and saved.predict(space, others[0]) == pytest.approx(predicted[0])


def test_fewer_timings_than_the_model_needs_say_how_many(space, tmp_path):
    path, *_ = planted_file(space, tmp_path / "t.csv", 5)
    with pytest.raises(ConfigError, match=r"5 timings; the model has 5 free costs \(4 layer groups \+ a constant\) "
                                          r"and needs at least 6 distinct archs timed \(or 3 with prior tables: priors=\)"):
        fit_table(space, read_timings(path, space))


def test_a_prior_from_another_device_cuts_the_timings_needed(space, tmp_path):
    """The target is the prior device 2.5x slower, with noise: 4 timings and the prior's table
    predict it; without the prior 4 timings are too few."""
    prior_path, costs, constant = planted_file(space, tmp_path / "other.csv", 20, seed=3, noise=0.01)
    target_path, *_ = planted_file(space, tmp_path / "target.csv", 4, seed=4, scale=2.5)
    priors = load_priors([f"{prior_path}:latency_ms"], space)
    table, report = fit_table(space, read_timings(target_path, space), priors)
    others = held_out(space, [])
    truth = np.array([2.5 * planted_ms(space, a, costs, constant) for a in others])
    predicted = np.array([table.predict(space, a) for a in others])
    assert spearmanr(predicted, truth)[0] >= 0.97 and np.mean(np.abs(predicted - truth) / truth) < 0.05
    assert report.priors == [str(prior_path)] and report.how.startswith("prior")
    with pytest.raises(ConfigError, match="needs at least 6 distinct archs"):
        fit_table(space, read_timings(target_path, space))


def test_the_fitted_table_drives_a_search_within_its_budget(three_ops, tmp_path):
    space = three_ops
    path, *_ = planted_file(space, tmp_path / "t.csv", 12)
    table, _ = fit_table(space, read_timings(path, space))
    table = LatencyTable.load(table.save(tmp_path / "fit.json"))
    latencies = sorted(table.predict(space, a) for a in held_out(space, [], 90))
    budget = latencies[len(latencies) // 3]
    evaluate = StubEvaluator(space, space.max())
    request = SearchRequest("random", tmp_path / "search", trials=20, seed=0,
                            constraints=Constraints(max_latency_ms=budget), progress=False, tensorboard=False)
    result = run_search(space, evaluate, request, latency=table, export=lambda a: None)
    records = [json.loads(line) for line in (tmp_path / "search" / "results.jsonl").read_text().splitlines()]
    assert len(records) == 20
    for record in records:
        assert record["latency_ms"] == pytest.approx(table.predict(space, record["arch"]), abs=1e-5)
        assert record["latency_ms"] <= budget
    assert result.latency_ms <= budget and result.latency_check is None   # a fitted target is not timed here


def test_a_measured_per_arch_column_answers_its_archs_and_only_them(space, tmp_path):
    archs = timed_archs(space, 8, seed=5)
    path = write_timings(tmp_path / "m.csv", [(json.dumps(a), 1.0 + i) for i, a in enumerate(archs)], "pixel")
    table = load_latency_source(f"{path}:pixel", space)
    assert [table.predict(space, a) for a in archs] == [1.0 + i for i in range(8)]
    missing = held_out(space, archs, 1)[0]
    with pytest.raises(SearchError, match=f"has no timing of arch {arch_id(missing)}.*predict_missing=True"):
        table.predict(space, missing)
    predicted = load_latency_source(f"{path}:pixel", space, predict_missing=True)
    fitted, _ = fit_table(space, read_timings(path, space, "pixel"))
    assert predicted.predict(space, missing) == pytest.approx(fitted.predict(space, missing))
    assert predicted.predict(space, archs[3]) == 4.0
    with pytest.raises(ConfigError, match="no column 'latency_ms'"):
        load_latency_source(str(path), space)
    fitted.save(tmp_path / "fit.json")
    with pytest.raises(ConfigError, match=r"^predict_missing: applies to a CSV latency table; .*fit.json predicts"):
        load_latency_source(str(tmp_path / "fit.json"), space, predict_missing=True)


def test_rows_of_one_network_use_the_canonical_row_or_the_median(space, tmp_path):
    arch = {"edge1<-0": "conv_3x3", "edge2<-0": "none", "edge2<-1": "none", "edge3<-0": "none",
            "edge3<-1": "skip_connect", "edge3<-2": "none"}
    assert space.canonical(arch) == arch
    dead = {**arch, "edge2<-0": "conv_1x1"}         # node 2 reaches no output: the same network
    other = {**arch, "edge3<-2": "avg_pool_3x3"}     # node 2 has no input: the same network again
    path = write_timings(tmp_path / "m.csv", [(to_nb201_string(dead), 7.0), (to_nb201_string(arch), 5.0)])
    assert load_latency_source(str(path), space).predict(space, arch) == 5.0
    path = write_timings(tmp_path / "n.csv", [(to_nb201_string(dead), 7.0), (to_nb201_string(other), 9.0)])
    with pytest.warns(UserWarning, match="1 archs are timed only in forms that differ"):
        assert load_latency_source(str(path), space).predict(space, arch) == 8.0


def repeated_file(space, path, rows_per_arch: list[int], seed: int = 1, noise: float = NOISE):
    """Archs timed by the planted model, arch k on `rows_per_arch[k]` rows (each with its own noise)."""
    costs, constant = planted_costs(space)
    rng = random.Random(seed + 100)
    rows = [(json.dumps(arch), f"{planted_ms(space, arch, costs, constant) * (1 + rng.gauss(0, noise)):.6f}")
            for arch, count in zip(timed_archs(space, len(rows_per_arch), seed), rows_per_arch) for _ in range(count)]
    return write_timings(path, rows)


def test_latency_fit_counts_distinct_archs_not_rows(space, tmp_path):
    """3 archs timed 3 times each, or one arch timed 20 times, are too few for 5 free costs."""
    thrice = repeated_file(space, tmp_path / "thrice.csv", [3, 3, 3])
    with pytest.raises(ConfigError, match=r"^timings: .*thrice.csv: 9 timings of 3 distinct archs; the model has 5 "
                                          r"free costs .* needs at least 6 distinct archs timed"):
        fit_table(space, read_timings(thrice, space))
    one = repeated_file(space, tmp_path / "one.csv", [20])
    with pytest.raises(ConfigError, match="20 timings of 1 distinct archs"):
        fit_table(space, read_timings(one, space))


def test_repeated_timings_of_an_arch_are_one_point_held_out_together(space, tmp_path):
    """A file timing each of 12 archs twice fits and holds out exactly as the file of their medians."""
    twice = read_timings(repeated_file(space, tmp_path / "twice.csv", [2] * 12), space)
    medians = {}
    for arch, ms in zip(twice.archs, twice.ms):
        medians.setdefault(arch_id(arch), (arch, []))[1].append(ms)
    once = write_timings(tmp_path / "once.csv", [(json.dumps(a), f"{sum(v) / 2!r}") for a, v in medians.values()])
    table, report = fit_table(space, twice)
    single, single_report = fit_table(space, read_timings(once, space))
    assert (report.timings, report.archs, single_report.timings) == (24, 12, 12)
    assert report.heldout_mape_pct == pytest.approx(single_report.heldout_mape_pct, rel=1e-9)
    assert report.heldout_spearman == single_report.heldout_spearman
    assert [row["heldout_ms"] for row in table.fit] == pytest.approx([row["heldout_ms"] for row in single.fit])
    assert [row["timings"] for row in table.fit] == [2] * 12


def test_an_arch_timed_far_off_its_other_timing_is_reported(space, tmp_path):
    archs = timed_archs(space, 7, seed=3)
    rows = [(json.dumps(a), 2.0 + i) for i, a in enumerate(archs)] + [(json.dumps(archs[2]), 20.0)]
    timings = read_timings(write_timings(tmp_path / "t.csv", rows), space)
    with pytest.warns(UserWarning, match=rf"1 archs are timed more than 2x apart in rows written alike \(first: arch "
                                         rf"{arch_id(archs[2])}, line 4: 4 ms, line 9: 20 ms\); their median is used"):
        points = timings.per_arch()
    assert points.ms[2] == 12.0 and points.counts[2] == 2


def test_a_search_predicting_missing_archs_refuses_too_few_distinct_archs_without_offering_priors(space, tmp_path):
    """`--predict-missing` on 3 archs timed 3 times: refused (it used to predict 0 ms for every
    arch), and search has no `--prior` to suggest."""
    path = repeated_file(space, tmp_path / "same.csv", [3, 3, 3])
    with pytest.raises(ConfigError, match=r"^latency_table: .*same.csv: 9 timings of 3 distinct archs") as caught:
        load_latency_source(str(path), space, predict_missing=True)
    assert "prior" not in str(caught.value)


def planted_table(space, costs: dict[str, float], constant: float, batch: int = 1) -> LatencyTable:
    entries = {key: {"median_ms": ms, "p90_ms": ms, "in_shape": [1], "macs": 0, "params": 0} for key, ms in costs.items()}
    return LatencyTable(space.name, space.fingerprint(), DeviceRecord("phone", "planted", "", 0, "", batch, False),
                        entries, constant, fitted={"planted": True})      # fitted: not timed here


def test_the_latency_floor_is_the_cheapest_live_arch_the_table_holds_not_the_min_subnets(three_ops, tmp_path):
    """On this table skip_connect is dear and conv_1x1 cheap: archs of more MACs than the min
    subnet (one skip edge) run faster; a budget between them is searched, one below is refused."""
    space = three_ops
    costs, constant = planted_costs(space)
    costs = {key: 0.5 if "skip" in key else 0.001 if "conv_1x1" in key else ms for key, ms in costs.items()}
    table = planted_table(space, costs, constant)
    live = [a for a in space.enumerate() if space.is_live(a)]
    floor = min(planted_ms(space, a, costs, constant) for a in live)
    low = planted_ms(space, space.min(), costs, constant)
    assert floor < low - 0.3
    budget = (floor + low) / 2
    request = SearchRequest("random", tmp_path / "search", trials=3, seed=0, progress=False, tensorboard=False,
                            constraints=Constraints(max_latency_ms=budget))
    result = run_search(space, StubEvaluator(space, space.max()), request, latency=table, export=lambda a: None)
    assert floor <= result.latency_ms <= budget
    request = dataclasses.replace(request, out=tmp_path / "below", constraints=Constraints(max_latency_ms=floor * 0.99))
    with pytest.raises(SearchError, match=rf"^max_latency_ms: .* is below the cheapest live arch of the latency table "
                                          rf"\(\w+: {floor:.3g} ms predicted on phone, batch 1\); raise the budget$"):
        run_search(space, StubEvaluator(space, space.max()), request, latency=table, export=lambda a: None)


def test_the_latency_floor_of_measured_per_arch_ms_is_their_cheapest_live_row(space, tmp_path):
    from nas.engine.searching.costs import SearchCosts

    dead = {key: "none" for key in space.choices()}
    others = [a for a in timed_archs(space, 12, seed=4) if space.is_live(a) and a != space.min()][:5]
    rows = [(json.dumps(space.min()), 1.47), (json.dumps(dead), 0.01)]
    rows += [(json.dumps(a), 1.05 + 0.03 * i) for i, a in enumerate(others)]
    source = load_latency_source(str(write_timings(tmp_path / "m.csv", rows)), space)
    SearchCosts(space, {"latency_ms": 1.2}, source).check_range()       # refused as below 1.47 before
    with pytest.raises(SearchError, match=rf"below the cheapest live arch of the latency table \({arch_id(others[0])}: "
                                          r"1.05 ms predicted on latency_ms, batch 1\)"):
        SearchCosts(space, {"latency_ms": 1.0}, source).check_range()


def test_a_latency_tables_batch_must_be_the_searchs(space, tmp_path):
    costs, constant = planted_costs(space)
    path = planted_table(space, costs, constant, batch=32).save(tmp_path / "b32.json")
    assert load_latency_source(str(path), space, batch_size=32).device.batch_size == 32
    with pytest.raises(ConfigError, match=rf"^batch: 1, but the latency table {path} was fitted at batch 32; "
                                          r"give batch=32 or a table of batch 1$"):
        load_latency_source(str(path), space, batch_size=1)


def test_the_search_summary_names_the_latency_table_its_device_and_batch(three_ops, tmp_path):
    from nas.engine.searching.summary import format_search_summary, search_summary

    space = three_ops
    path, *_ = planted_file(space, tmp_path / "t.csv", 8)
    table, _ = fit_table(space, read_timings(path, space), device="pixel3")
    saved = table.save(tmp_path / "fit.json")
    request = SearchRequest("random", tmp_path / "search", trials=3, seed=0, progress=False, tensorboard=False,
                            constraints=Constraints(max_latency_ms=1e3))
    result = run_search(space, StubEvaluator(space, space.max()), request, latency=load_latency_source(str(saved), space),
                        export=lambda a: None)
    assert result.to_json()["latency_table"] == {"table": str(saved), "device": "pixel3", "batch": 1}
    text = format_search_summary(search_summary(tmp_path / "search"))
    assert f"latency {result.latency_ms:.3f} ms ({saved}, pixel3, batch 1) of a 1000 ms budget" in text, text


# --- the CLI: one line per problem, exit 2 ---------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_yaml(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "tiny_cell201.yaml"
    path.write_text(yaml_io.dumps(tiny_config(space="cell201")))
    return path


@pytest.fixture(scope="module")
def tiny_space(tiny_yaml):
    from nas.core.config import load_config
    from nas.engine.run import build_space
    return build_space(load_config(str(tiny_yaml)))


def _fit(capsys, tiny_yaml, csv_path, *flags):
    code = cli.main(["latency-fit", str(tiny_yaml), str(csv_path), "--out", str(csv_path.with_suffix(".json")), *flags])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cli_fits_and_writes_the_table(capsys, tiny_yaml, tiny_space, tmp_path):
    path, *_ = planted_file(tiny_space, tmp_path / "t.csv", 10)
    code, out, err = _fit(capsys, tiny_yaml, path, "--name", "fpga", "--json")
    assert code == 0 and err == ""
    report = json.loads(out)
    assert report["path"] == str(path.with_suffix(".json")) and report["timings"] == 10 and report["free_costs"] == 4
    table = LatencyTable.load(report["path"])
    assert table.device.device == "fpga" and table.fitted["heldout_mape_pct"] == report["heldout_mape_pct"]


def _bad_rows(tiny_space):
    archs = timed_archs(tiny_space, 6, seed=9)
    good = [(json.dumps(a), 3.0 + i) for i, a in enumerate(archs)]
    mbv3 = make_space("mobilenetv3", small=True)
    return {
        "another space": ([(json.dumps(mbv3.sample(random.Random(i))), 2.0) for i in range(6)],
                          r"its archs belong to another space, not 'cell201'"),
        "unknown arch": (good[:5] + [("0123456789", 2.0)], r"line 7: arch: '0123456789' is no arch id of space"),
        "negative": (good[:5] + [(good[5][0], "-1.5")], r"line 7: latency_ms: must be a finite number of "
                                                        r"milliseconds > 0, got -1.5"),
        "zero": ([(good[0][0], "0")] + good[1:], r"line 2: latency_ms: must be .* > 0, got 0$"),
        "missing": (good[:5] + [(good[5][0], "")], r"line 7: latency_ms: missing value"),
        "too few": (good[:4], r"4 timings; the model has 4 free costs .* needs at least 5 distinct archs"),
    }


@pytest.mark.parametrize("case", ["another space", "unknown arch", "negative", "zero", "missing", "too few"])
def test_bad_timings_fail_in_one_line(capsys, tiny_yaml, tiny_space, tmp_path, case):
    rows, message = _bad_rows(tiny_space)[case]
    code, out, err = _fit(capsys, tiny_yaml, write_timings(tmp_path / "t.csv", rows))
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("nas latency-fit: error: ")
    assert __import__("re").search(message, err.strip()), err


def test_a_fit_from_few_archs_says_its_held_out_figures_are_rough(capsys, tiny_yaml, tiny_space, tmp_path):
    path, *_ = planted_file(tiny_space, tmp_path / "t.csv", 6)
    code, out, err = _fit(capsys, tiny_yaml, path)
    assert code == 0 and err == ""
    assert re.search(r"fitted from 6 timed archs \(4 free costs, plain\); held out over 6 archs \(rough: fewer than "
                     r"20 archs\): Spearman -?[01]\.\d{3}, MAPE \d+\.\d%$", out.strip()), out
    code, out, _ = _fit(capsys, tiny_yaml, path, "--json")
    assert json.loads(out)["archs"] == 6 and json.loads(out)["rough"] is True
    path, *_ = planted_file(tiny_space, tmp_path / "many.csv", 20)
    code, out, _ = _fit(capsys, tiny_yaml, path)
    assert code == 0 and "held out over 20 archs: Spearman" in out


def test_a_binary_timings_file_or_table_is_one_line(capsys, tiny_yaml, tiny_space, tmp_path):
    binary = tmp_path / "t.csv"
    binary.write_bytes(b"arch,latency_ms\n\xff\xfe\x00\x01")
    code, out, err = _fit(capsys, tiny_yaml, binary)
    assert code == 2 and out == "" and err.strip() == (f"nas latency-fit: error: timings: {binary}: not a UTF-8 text file (byte "
                                                       "0xff at offset 16); timings are a CSV file")
    good, *_ = planted_file(tiny_space, tmp_path / "good.csv", 6)
    (tmp_path / "prior.json").write_bytes(b"\x89PNG\r\n\x1a\n\xff")
    code, out, err = _fit(capsys, tiny_yaml, good, "--prior", str(tmp_path / "prior.json"))
    assert code == 2 and len(err.splitlines()) == 1 and "prior.json: not a latency table" in err, err
    with pytest.raises(ConfigError, match=r"^latency_table: .*t.csv: not a UTF-8 text file \(byte 0xff at offset 16\)"):
        load_latency_source(f"{binary}:latency_ms", tiny_space)


@pytest.fixture
def run_copy(trained, tmp_path):
    """A copy of the shared tiny run, which a latency fit may write into."""
    shutil.copytree(trained / "tiny", tmp_path / "runs" / "tiny")
    return tmp_path / "runs"


def test_latency_fit_names_its_table_only_by_a_plain_name(capsys, run_copy, tiny_yaml, tiny_space, tmp_path):
    from nas import api

    space = api.load_run("tiny", run_copy, device="cpu").space
    rows = [(json.dumps(a), 1.0 + i) for i, a in enumerate(timed_archs(space, 8, 1))]
    path = write_timings(tmp_path / "t.csv", rows)
    before = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    fit = ["latency-fit", "tiny", str(path), "--runs-dir", str(run_copy)]
    assert cli.main([*fit, "--name", "../../../evil"]) == 2
    assert capsys.readouterr().err.strip() == ("nas latency-fit: error: --name: '../../../evil' is not a valid name: "
                                               "use letters, digits, '.', '_' and '-' (no '/', not '.' or '..')")
    slashed = write_timings(tmp_path / "s.csv", rows, "gpu/b1")
    assert cli.main([*fit[:2], str(slashed), *fit[3:], "--column", "gpu/b1"]) == 2
    assert capsys.readouterr().err.strip() == ("nas latency-fit: error: --name: the column 'gpu/b1' is no plain name for "
                                               "the table's file; give --name NAME")
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == sorted([*before, slashed])
    planted, *_ = planted_file(tiny_space, tmp_path / "p.csv", 6)
    assert _fit(capsys, tiny_yaml, planted, "--name", "pixel3.b1", "--json")[0] == 0
    assert LatencyTable.load(planted.with_suffix(".json")).device.device == "pixel3.b1"


def test_a_nas_bench_201_timings_file_for_another_space_says_so(tmp_path):
    mbv3 = make_space("mobilenetv3")        # too large to list: its ids are not resolved
    path = write_timings(tmp_path / "nb201.csv", [("|nor_conv_3x3~0|+|none~0|skip_connect~1|+|none~0|none~1|"
                                                   "skip_connect~2|", 5.0)] * 3)
    with pytest.raises(ConfigError, match=r"^timings: .*nb201.csv: its archs belong to another space, not 'mobilenetv3' "
                                          r"\(first row: arch: '\|nor_conv_3x3.*' is a NAS-Bench-201 string, which only "
                                          r"a cell201 space reads \(this space is 'mobilenetv3'\)\)$"):
        read_timings(path, mbv3)


def test_seconds_given_for_milliseconds_are_warned_of(capsys, tiny_yaml, tiny_space, tmp_path):
    path, *_ = planted_file(tiny_space, tmp_path / "t.csv", 10, scale=1e-3)
    code, out, err = _fit(capsys, tiny_yaml, path)
    assert code == 0 and "held out" in out
    assert err.splitlines() == [err.strip()] and "were these seconds?" in err and "warning" in err


def test_a_prior_of_another_space_is_refused(capsys, tiny_yaml, tiny_space, space, tmp_path):
    path, *_ = planted_file(space, tmp_path / "wide.csv", 10)
    other, _ = fit_table(space, read_timings(path, space))
    other.save(tmp_path / "wide.json")
    target, *_ = planted_file(tiny_space, tmp_path / "t.csv", 6)
    code, _, err = _fit(capsys, tiny_yaml, target, "--prior", str(tmp_path / "wide.json"))
    assert code == 2 and err.strip().endswith(f"--prior: {tmp_path / 'wide.json'}: built for another space "
                                              "(cell201); give tables of 'cell201' with these options")


def test_a_search_takes_its_latency_from_a_fitted_table_or_a_measured_column(capsys, trained, tmp_path):
    from nas import api
    from nas.engine.latency.fit import space_groups
    from nas.engine.latency.table import table_archs

    space = api.load_run("tiny", trained, device="cpu").space
    rng = random.Random(0)
    costs = {key: rng.uniform(0.05, 1.0) for key in space_groups(space)[1]}
    archs = table_archs(space) + timed_archs(space, 40, seed=2)     # every layer timed at least once
    rows = [(json.dumps(a), f"{(1.0 + sum(costs[l.key] for l in space.layers(a))) * (1 + rng.gauss(0, 0.01)):.6f}")
            for a in archs]
    timings = write_timings(tmp_path / "t.csv", rows)
    assert cli.main(["latency-fit", str(trained / "tiny"), str(timings), "--out", str(tmp_path / "fit.json")]) == 0
    table = LatencyTable.load(tmp_path / "fit.json")
    budget = sorted(table.predict(space, a) for a in archs)[30]
    search = ["search", "tiny", "--runs-dir", str(trained), "--searcher", "random", "--trials", "4", "--score", "macs",
              "--max-latency-ms", f"{budget:.6f}", "--device", "cpu", "--quiet"]
    capsys.readouterr()
    assert cli.main([*search, "--latency-table", str(tmp_path / "fit.json"), "--out", str(tmp_path / "s"), "--json"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["latency_ms"] == pytest.approx(table.predict(space, result["best"]), abs=1e-5)
    assert result["latency_ms"] <= budget and "measured" not in err     # the target is not timed here
    few = write_timings(tmp_path / "few.csv", rows[:3])
    assert cli.main([*search, "--latency-table", str(few), "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no timing of arch" in err and "--predict-missing" in err, err
    assert cli.main([*search, "--predict-missing", "--out", str(tmp_path / "g")]) == 2
    assert capsys.readouterr().err.strip() == ("nas search: error: --predict-missing: applies to a CSV latency table; "
                                               "give --latency-table CSV[:COLUMN]")


def test_the_benchmark_reads_the_layers_each_runtime_ran():
    """`benchmarks/latency_fit.py`: PyTorch runs every edge (`none` too), TFLite the edges that
    reach the output; `nas` itself only the live ones."""
    from benchmarks import latency_fit as bench

    space = bench.paper_space()
    arch = {"edge1<-0": "conv_3x3", "edge2<-0": "conv_1x1", "edge2<-1": "none", "edge3<-0": "skip_connect",
            "edge3<-1": "avg_pool_3x3", "edge3<-2": "none"}     # node 2 reaches no output
    ops = {reading: sorted(op for _, _, op in bench.ran_edges(arch, reading)) for reading in bench.READINGS}
    assert ops == {"every": ["avg_pool_3x3", "conv_1x1", "conv_3x3", "skip_connect"],
                   "to_output": ["avg_pool_3x3", "conv_3x3", "skip_connect"]}
    every = bench.ran_layers(space, arch, "every")       # 5 cells per stage
    assert every["edge:none:16x32x32"] == every["edge:none:64x8x8"] == 10 and every["edge:conv_1x1:32x16x16"] == 5
    assert bench.ran_layers(space, arch, "to_output")["edge:conv_1x1:32x16x16"] == 0
    live = {layer.key for layer in space.layers(arch) if layer.key.startswith("edge:") and "16x32x32" in layer.key}
    assert live == {"edge:avg_pool_3x3:16x32x32", "edge:conv_3x3:16x32x32", "edge:skip_connect:16x32x32"}


def test_timings_saved_with_a_byte_order_mark_and_spaces_after_commas_read_as_written(space, tmp_path):
    archs = timed_archs(space, 3, seed=3)
    plain = write_timings(tmp_path / "plain.csv", [(to_nb201_string(a), f"{1 + i}.5") for i, a in enumerate(archs)])
    spreadsheet = tmp_path / "sheet.csv"
    spreadsheet.write_text("\ufeff" + plain.read_text().replace(",", ", "), encoding="utf-8")
    read, expected = read_timings(spreadsheet, space), read_timings(plain, space)
    assert read.ms == expected.ms == [1.5, 2.5, 3.5] and read.archs == expected.archs
