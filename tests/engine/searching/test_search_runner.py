"""The search runner's outputs: results.jsonl, Pareto fronts, best.yaml, latency constraints."""
from __future__ import annotations

import json

import pytest

from nas.core.arch import read_arch_file
from nas.core.errors import ConfigError, SearchError
from nas.core.pareto import crowding, front, ranks
from nas.engine.export import save_export
from nas.engine.latency.measure import device_record
from nas.engine.latency.table import LatencyTable
from nas.engine.searching.results import read_results
from nas.engine.searching.costs import Constraints
from nas.engine.searching.loop import run_search
from nas.engine.searching.request import SearchRequest
from tests.conftest import make_supernet
from tests.searchers.stub import (  # noqa: F401
    MAX_MACS,
    StubEvaluator,
    search_dir,
    small_space,
    target_arch,
)


@pytest.fixture(scope="module")
def space():
    return small_space()


@pytest.fixture(scope="module")
def supernet(space):
    return make_supernet(space)


@pytest.fixture(scope="module")
def evaluate(space):
    return StubEvaluator(space, target_arch(space))


def _fake_table(space) -> LatencyTable:
    """A table whose entries are 1 ms per million MACs (no timing), plus 0.05 ms."""
    entries = {layer.key: {"median_ms": layer.macs / 1e6, "p90_ms": layer.macs / 1e6, "in_shape": list(layer.in_shape),
                           "macs": layer.macs, "params": layer.params}
               for arch in space.enumerate() for layer in space.layers(arch)}
    return LatencyTable(space.name, space.fingerprint(), device_record("cpu", 1), entries, constant_ms=0.05)


def _dominated(point, others, cost):
    return any(o[cost] <= point[cost] and o["val_top1"] >= point["val_top1"]
               and (o[cost], o["val_top1"]) != (point[cost], point["val_top1"]) for o in others)


@pytest.mark.slow
def test_outputs_of_a_search(space, supernet, evaluate, search_dir):
    budget = Constraints(max_macs=MAX_MACS, max_params=30_000)
    result = run_search(space, evaluate, SearchRequest("evolution", search_dir, trials=30, seed=1, constraints=budget))
    records = [json.loads(line) for line in (search_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == 30 == result.evaluated == result.new
    for record in records:
        assert list(record)[:6] == ["trial", "arch", "arch_id", "val_top1", "macs", "params"]
        assert "distance" in record and record["macs"] <= MAX_MACS and record["params"] <= 30_000

    pareto = json.loads((search_dir / "pareto.json").read_text())
    assert pareto["costs"] == ["macs", "params"] and pareto["budgets"] == {"macs": MAX_MACS, "params": 30_000}
    for cost in ("macs", "params"):
        points = pareto["fronts"][cost]
        assert points and [p[cost] for p in points] == sorted(p[cost] for p in points)
        assert not any(_dominated(p, records, cost) for p in points)
        undominated = {r["arch_id"] for r in records if not _dominated(r, records, cost)}
        assert {p["arch_id"] for p in points} <= undominated
        assert points[-1]["val_top1"] == result.val_top1
    assert (search_dir / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    assert list((search_dir / "tb").glob("events.out.tfevents.*"))

    best = read_arch_file(search_dir / "best.yaml")
    space.validate(best)
    assert best == result.best and result.record["arch_id"] == result.arch_id
    export = save_export(supernet, best, search_dir / "export")
    assert export["macs"] == result.macs and (search_dir / "export" / "model.pt2").is_file()
    assert set(result.to_json()) >= {"best", "val_top1", "macs", "dir"}
    summary = json.loads((search_dir / "summary.json").read_text())
    assert summary["best"] == best and summary["options"]["population"] == 10


def test_latency_constraint_uses_the_table_and_verifies_the_pick(space, supernet, evaluate, search_dir):
    table = _fake_table(space)
    budget = Constraints(max_latency_ms=0.8)
    result = run_search(space, evaluate, SearchRequest("random", search_dir, trials=15, constraints=budget,
                                                       progress=False, tensorboard=False),
                        latency=table, export=supernet.export)
    for record in read_results(search_dir / "results.jsonl"):
        assert record["latency_ms"] == pytest.approx(table.predict(space, record["arch"]))
        assert record["latency_ms"] <= 0.8
    check = result.latency_check
    assert check["predicted_ms"] == pytest.approx(result.latency_ms) and check["measured_ms"] > 0
    error = 100 * (check["predicted_ms"] - check["measured_ms"]) / check["measured_ms"]
    assert check["error_pct"] == pytest.approx(error)
    assert check["device"]["threads"] == 1
    assert json.loads((search_dir / "pareto.json").read_text())["costs"] == ["macs", "latency_ms"]
    with pytest.raises(SearchError, match=r"^max_latency_ms: 0.1 is below the cheapest live arch of the latency table "
                                          r"\(\w+: 0.385 ms predicted on cpu, batch 1\)"):
        run_search(space, evaluate, SearchRequest("random", search_dir / "tight", trials=5, progress=False,
                                                  tensorboard=False, constraints=Constraints(max_latency_ms=0.1)),
                   latency=table)


def test_bad_arguments_are_reported(space, evaluate, search_dir):
    with pytest.raises(ConfigError, match="^max_latency_ms: needs a latency table"):
        run_search(space, evaluate, SearchRequest("random", search_dir, trials=5,
                                                  constraints=Constraints(max_latency_ms=1.0)))
    with pytest.raises(ConfigError, match="^max_macs: must be > 0, got -1"):
        Constraints(max_macs=-1)
    with pytest.raises(ConfigError, match="^trials: must be an integer >= 1, got 0"):
        run_search(space, evaluate, SearchRequest("random", search_dir, trials=0))
    with pytest.raises(SearchError, match=r"evaluate: returned val_top1=93.0 for arch \w+; expected a fraction"):
        run_search(space, lambda arch: {"val_top1": 93.0},
                   SearchRequest("random", search_dir, trials=2, progress=False, tensorboard=False))


def _line(trial: int) -> str:
    return json.dumps({"trial": trial, "arch": {"a": trial}, "arch_id": f"id{trial}", "val_top1": 0.5,
                       "macs": 1, "params": 1})


def test_results_file_with_a_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(f'{_line(0)}\n{{"tri\n{_line(2)}\n')
    with pytest.raises(SearchError, match="results.jsonl:2: not a JSON record"):
        read_results(path)
    path.write_text(f'{_line(0)}\n{{"tri')
    assert read_results(path) == [json.loads(_line(0))] and path.read_text() == f"{_line(0)}\n"
    path.write_text(f'{_line(0)}\n{{"trial": 1}}\n')
    with pytest.raises(SearchError, match="results.jsonl:2: not a search record"):
        read_results(path)


def test_front_ranks_and_crowding():
    records = [{"trial": i, "macs": m, "val_top1": a}
               for i, (m, a) in enumerate([(1, 0.5), (2, 0.7), (2, 0.6), (3, 0.7), (4, 0.9), (1, 0.5), (5, 0.8)])]
    assert [r["trial"] for r in front(records, "macs")] == [0, 1, 4]
    assert ranks([(1, 1), (2, 2), (0, 3), (3, 3)]) == [0, 1, 0, 2]
    distance = crowding([(0.0, 3.0), (1.0, 2.0), (3.0, 0.0)])
    assert distance[0] == distance[2] == float("inf") and distance[1] == pytest.approx(2.0)


def test_every_listed_cost_has_a_budget_field_and_a_search_flag(capsys):
    import dataclasses

    from nas import cli
    from nas.core.costs import COSTS

    assert {f.name for f in dataclasses.fields(Constraints)} == {f"max_{cost.name}" for cost in COSTS}
    assert cli.main(["search", "--help"]) == 0
    help_text = capsys.readouterr().out
    flags = cli.flag_names(cli.command_parser(cli.build_parser(), "search"))
    for cost in COSTS:
        assert flags[cost.param] == "--" + cost.param.replace("_", "-") and flags[cost.param] in help_text
    budgets = Constraints(**{f"max_{cost.name}": 2.0 for cost in COSTS}).budgets()
    assert list(budgets) == [cost.name for cost in COSTS]
