"""benchmarks/: the registry of every benchmark with its cost class, and the shared timing loop,
threads, provenance and JSON line of benchmarks/common.py."""
from __future__ import annotations

import itertools
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import BENCHMARKS, COSTS, Command, common
from benchmarks.__main__ import listing
from nas.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SHARED = {"__init__", "__main__", "common", "nb201_data"}   # nb201_data: the NAS-Bench-201 files, for the nb201_* scripts


def test_every_benchmark_module_is_registered_and_every_entry_has_a_module():
    modules = {p.stem for p in (REPO / "benchmarks").glob("*.py")} - SHARED
    assert modules == set(BENCHMARKS)
    assert all(commands and all(c.cost in COSTS for c in commands) for commands in BENCHMARKS.values())
    with pytest.raises(ValueError, match="cost: 'days' is not one of seconds, minutes, hours"):
        Command("days")


def test_the_list_shows_every_command_with_its_class_and_marks_the_quick_ones():
    lines = listing().splitlines()[1:]
    assert len(lines) == sum(len(c) for c in BENCHMARKS.values())
    by_command = {line[11:].split("   [needs")[0]: line for line in lines}
    line = by_command["python -m benchmarks.elastic_overhead --space vit"]
    assert line.startswith("minutes  * ")
    line = by_command["python -m benchmarks.search_quality RUN"]
    assert line.startswith("hours      ") and line.endswith("[needs a trained run (RUN)]")
    assert by_command["python -m benchmarks.gpu_check"].startswith("minutes    ")       # needs a GPU: not run
    assert by_command["python -m benchmarks.standalone_speed"].startswith("hours      ")


def test_python_dash_m_benchmarks_prints_the_list():
    done = subprocess.run([sys.executable, "-m", "benchmarks"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == listing()


def test_warm_up_rounds_are_untimed_and_the_order_flips_every_other_round():
    calls, ticks = [], itertools.count()
    clock = lambda: float(next(ticks))
    steps = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    times = common.alternating_times(steps, timed=3, warmup=2, clock=clock)
    assert "".join(calls) == "ab" "ba" "ab" "ba" "ab"
    assert times == {"a": [1.0] * 3, "b": [1.0] * 3}        # two readings per timed call, none in warm-up
    assert next(ticks) == 2 * 2 * 3
    synced = []
    assert common.timed_steps(lambda: None, 2, 0, clock=clock, sync=lambda: synced.append(1)) == [1.0, 1.0]
    assert len(synced) == 4
    with pytest.raises(ValueError, match="timed >= 1"):
        common.timed_steps(lambda: None, 0)


def test_threads_are_set_from_the_argument_and_checked():
    before = torch.get_num_threads()
    try:
        assert common.use_threads(1) == 1 == torch.get_num_threads()
        assert common.use_threads(None) == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(SystemExit, match="--threads: must be >= 1, got 0"):
        common.use_threads(0)


def test_the_json_line_holds_the_figures_the_command_and_the_provenance(capsys):
    record = common.emit("elastic_overhead", {"ratio": 1.02}, ["--space", "vit", "--batch", "2"])
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and json.loads(out) == record
    assert list(record)[:2] == ["benchmark", "ratio"] and record["ratio"] == 1.02
    assert shlex.split(record["command"]) == ["python", "-m", "benchmarks.elastic_overhead", "--space", "vit",
                                              "--batch", "2"]
    facts = record["provenance"]
    assert facts["torch"] == torch.__version__ and facts["threads"] == torch.get_num_threads()
    assert {"git_commit", "cpu", "cpu_count", "python", "omp_num_threads"} <= set(facts)
    assert facts["date"].endswith(" UTC") and len(facts["date"]) == len("2026-12-05 01:30 UTC")


def test_bad_input_is_one_line_with_exit_code_2(capsys):
    def main():
        raise ConfigError("--budget: 200%: must be between 0% and 100%")

    main.__module__ = "benchmarks.search_regret"
    with pytest.raises(SystemExit) as exit_info:
        common.run(main)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "search_regret: --budget: 200%: must be between 0% and 100%\n"


def test_an_error_from_below_names_the_flag_the_command_line_gave(capsys, monkeypatch):
    """`arch: ...` from the core reads `--arch: ...` after `--arch X`; a parameter not given as a
    flag keeps its Python name, and so does a fix's reference to one."""
    def main():
        raise ConfigError("nope.yaml: no such file", param="arch", fix="or pass {max_macs=50%}")

    main.__module__ = "benchmarks.subnet_vs_standalone"
    monkeypatch.setattr(sys, "argv", ["subnet_vs_standalone.py", "RUN", "--arch", "nope.yaml"])
    with pytest.raises(SystemExit):
        common.run(main)
    assert capsys.readouterr().err == "subnet_vs_standalone: --arch: nope.yaml: no such file; or pass max_macs='50%'\n"
    monkeypatch.setattr(sys, "argv", ["subnet_vs_standalone.py", "RUN", "--max-macs=50%"])
    with pytest.raises(SystemExit):
        common.run(main)
    assert capsys.readouterr().err == "subnet_vs_standalone: arch: nope.yaml: no such file; or pass --max-macs 50%\n"
