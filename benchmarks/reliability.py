"""Reliability: malformed inputs through every verb, and processes killed while they write.

Inputs: every case of tests/data/malformed/cases.yaml through every verb that reads it, in one
process (`nas.cli.main`). Handled = exit code 2, exactly one line on stderr, no traceback, the
expected problem named, and no file of the watched folder created, lost or changed.

Kills: each scenario first runs uninterrupted (the reference), its writes watched; then
`--kills` fresh processes are each killed at a random moment (seeded) among their writes: a
random delay after a random one of them, cycling SIGKILL, SIGTERM and SIGINT (see `kills`).
The outcome is checked:
- train (`nas train`, the tiny test config, 24 steps, a checkpoint every 4): every checkpoint
  left loads (digest verified, finite); `nas train --resume` finishes the run; its final
  weights equal the reference's bit for bit and metrics.jsonl equals the reference's records.
- search (`nas search --searcher evolution --trials 16` on a tiny run): results.jsonl holds the
  reference's first archs in order; resuming to 16 gives the reference's archs in its order.
- export (`nas export --arch min` into a folder holding an export of max): the folder holds
  the old export byte for byte or the whole new one (its files, min's arch_id, a program that
  loads), never a mix; the next export succeeds and leaves no temporary folder.

    python -m benchmarks.reliability [--kills 10] [--seed 0] [--parts inputs,train,search,export]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import common
from nas import api, cli
from nas.core import yaml_io
from nas.core.arch import arch_id
from nas.core.config import load_config
from nas.core.errors import NasError
from nas.engine.checkpoint import load_checkpoint, non_finite_tensors
from tests.support.corpus import case_argv, cases, derive_checkpoints, folder_digests
from tests.support.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[1]
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)


def quiet_cli(argv: list[str]) -> tuple[int, str]:
    """`nas.cli.main(argv)` with stdout dropped; (exit code, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    return code, err.getvalue().strip()


# -- malformed inputs ------------------------------------------------------------------------
def inputs(work: Path, base: Path) -> dict:
    """Every corpus case through its verbs: tried and handled per verb."""
    derived = derive_checkpoints(base / "tiny" / "checkpoints" / "last.pt", work / "derived")
    by_verb: dict[str, list[int]] = {}
    failures = []
    for index, (kind, name, verb, message) in enumerate(cases()):
        tmp = work / f"case{index}"
        tmp.mkdir()
        argv, watched = case_argv(kind, name, verb, base, derived, tmp)
        before = folder_digests(watched)
        code, err = quiet_cli(argv)
        handled = (code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err and message in err
                   and folder_digests(watched) == before)
        counts = by_verb.setdefault(verb, [0, 0])
        counts[0] += 1
        counts[1] += handled
        if not handled:
            failures.append(f"{kind}/{name} ({verb}): exit {code}: {err[-200:]}")
        shutil.rmtree(tmp)
    return {"by_verb": by_verb, "failures": failures}


# -- kills -------------------------------------------------------------------------------------
def start(argv: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with open(log, "w") as err:
        return subprocess.Popen([sys.executable, "-m", "nas", *argv], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=err)


class Progress:
    """How many writes a process has made so far, seen by polling its files: the run's
    config.yaml and every new last.pt (train); search.json and every results line (search);
    the temporary folder, then the swap that puts it in place (export)."""

    def __init__(self, kind: str, folder: Path):
        self.kind, self.folder, self.mtimes, self.building = kind, folder, set(), False
        metrics = folder / "metrics.json"
        self.exported = metrics.stat().st_mtime_ns if metrics.exists() else None

    def __call__(self) -> int:
        try:
            if self.kind == "train":
                last = self.folder / "checkpoints" / "last.pt"
                if last.exists():
                    self.mtimes.add(last.stat().st_mtime_ns)
                return int((self.folder / "config.yaml").exists()) + len(self.mtimes)
            if self.kind == "search":
                results = self.folder / "results.jsonl"
                lines = results.read_bytes().count(b"\n") if results.exists() else 0
                return int((self.folder / "search.json").exists()) + lines
            prefix = f".{self.folder.name}."
            self.building = self.building or any(p.name.startswith(prefix) and p.name.endswith(".tmp")
                                                 for p in self.folder.parent.iterdir())
            metrics = self.folder / "metrics.json"
            swapped = metrics.exists() and metrics.stat().st_mtime_ns != self.exported
            return int(self.building) + int(swapped)
        except FileNotFoundError:       # renamed while we looked: look again
            return self()


def observe(argv: list[str], progress: Progress, log: Path) -> tuple[list[float], float]:
    """One uninterrupted run (it must succeed): seconds from its start to each write, and to its end."""
    began, events = time.monotonic(), []
    proc = start(argv, log)
    while proc.poll() is None:
        while progress() > len(events):
            events.append(time.monotonic() - began)
        time.sleep(0.002)
    if proc.returncode != 0 or not events:
        raise SystemExit(f"reference run failed: {' '.join(argv)}: {log.read_text()[-500:]}")
    return events, time.monotonic() - began


def kill_at(argv: list[str], progress: Progress, writes: int, delay: float, signum: int, log: Path) -> str:
    """Start `argv`; `delay` s after its `writes`-th write send `signum`. The signal's name, or
    'finished' when the process ended first."""
    proc = start(argv, log)
    while progress() < writes and proc.poll() is None:
        time.sleep(0.002)
    try:
        proc.wait(timeout=delay)
        return "finished"
    except subprocess.TimeoutExpired:
        proc.send_signal(signum)
        proc.wait()
        return signal.Signals(signum).name


def _records(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [{k: v for k, v in json.loads(line).items() if k != "elapsed_s"} for line in path.read_text().splitlines()]


class Train:
    """`nas train` of the tiny config (24 steps, a checkpoint every 4) killed, then resumed."""

    kind = "train"

    def __init__(self, work: Path, base: Path):
        self.work, self.config = work, work / "train.yaml"
        self.config.write_text(yaml_io.dumps(tiny_config(steps=24, checkpoint={"every_steps": 4,
                                                                               "every_seconds": 600})))

    def argv(self, name: str) -> list[str]:
        return ["train", str(self.config), "--name", name, "--runs-dir", str(self.work / "train"), "--quiet"]

    def folder(self, name: str) -> Path:
        return self.work / "train" / name

    def before(self, name: str) -> None:
        pass

    def check(self, name: str, how: str) -> dict:
        """Every checkpoint left loads and is finite; the resumed run ends as the reference."""
        run, reference = self.folder(name), self.folder("ref")
        left = sorted((run / "checkpoints").glob("*.pt")) if (run / "checkpoints").is_dir() else []
        try:
            loads = all(not non_finite_tensors(load_checkpoint(p)) for p in left)
            step = load_checkpoint(run / "checkpoints" / "last.pt")["step"] if left else None
        except NasError:
            loads, step = False, None
        code, err = quiet_cli([*self.argv(name), *(["--resume"] if (run / "config.yaml").is_file() else [])])
        final = load_checkpoint(run / "checkpoints" / "last.pt")["model"] if code == 0 else {}
        expected = load_checkpoint(reference / "checkpoints" / "last.pt")["model"]
        equal = final.keys() == expected.keys() and all(bool((final[k] == expected[k]).all()) for k in expected)
        same_log = _records(run / "metrics.jsonl") == _records(reference / "metrics.jsonl")
        return {"how": how, "checkpoint_step_after_kill": step, "checkpoints_load": loads,
                "survived": loads and code == 0 and equal and same_log, "error": err[-200:] if code else ""}


class Search:
    """`nas search --searcher evolution --trials 16` of the tiny run killed, then resumed."""

    kind = "search"

    def __init__(self, work: Path, base: Path):
        self.work, self.base = work, base

    def argv(self, name: str) -> list[str]:
        return ["search", "tiny", "--runs-dir", str(self.base), "--searcher", "evolution", "--trials", "16",
                "--out", str(self.folder(name)), "--quiet"]

    def folder(self, name: str) -> Path:
        return self.work / "search" / name

    def before(self, name: str) -> None:
        pass

    def ids(self, name: str) -> list[str]:
        results = self.folder(name) / "results.jsonl"
        lines = results.read_text().splitlines() if results.is_file() else []
        ids = []
        for line in lines:
            try:
                ids.append(json.loads(line)["arch_id"])
            except ValueError:      # a line torn by the kill: only ever the last one
                pass
        return ids

    def check(self, name: str, how: str) -> dict:
        """The archs evaluated before the kill are the reference's first ones; resumed, all of them."""
        reference, done = self.ids("ref"), self.ids(name)
        code, err = quiet_cli(self.argv(name))
        return {"how": how, "evaluated_before_kill": len(done), "survived": done == reference[: len(done)]
                and code == 0 and self.ids(name) == reference, "error": err[-200:] if code else ""}


class Export:
    """`nas export --arch min` into a folder holding an export of max, killed while it writes."""

    kind = "export"

    def __init__(self, work: Path, base: Path):
        self.work, self.base, self.old = work, base, {}
        self.min_id = arch_id(api.load_run("tiny", base).space.min())
        (work / "export").mkdir(parents=True, exist_ok=True)

    def argv(self, name: str) -> list[str]:
        return ["export", "tiny", "--runs-dir", str(self.base), "--arch", "min", "--out", str(self.folder(name))]

    def folder(self, name: str) -> Path:
        return self.work / "export" / name

    def before(self, name: str) -> None:
        argv = self.argv(name)
        argv[argv.index("min")] = "max"
        assert quiet_cli(argv)[0] == 0
        self.old = folder_digests(self.folder(name))

    def check(self, name: str, how: str) -> dict:
        """The old export byte for byte or the whole new one; the next export succeeds, no leftovers."""
        folder = self.folder(name)
        now = folder_digests(folder) if folder.is_dir() else {}
        if now == self.old:
            state = "old export"
        elif now.keys() == self.old.keys() and json.loads((folder / "metrics.json").read_text())["arch_id"] == \
                self.min_id:
            torch.export.load(str(folder / "model.pt2"))
            state = "new export"
        else:
            state = "MIXED"
        code, _ = quiet_cli(self.argv(name))
        leftovers = [p.name for p in folder.parent.iterdir() if p.name.startswith(f".{name}.")]
        return {"how": how, "state": state, "survived": state != "MIXED" and code == 0 and not leftovers}


def kills(work: Path, base: Path, count: int, seed: int, parts: list[str]) -> dict:
    """Every scenario of `parts`: a reference run, then `count` runs killed at random writes.

    A killed run is stopped a random delay (below the reference's median time between writes)
    after a random one of the writes the reference made but its last (after which it only
    closes its files).
    """
    rng, report = random.Random(seed), {}
    for part in parts:
        scenario = {"train": Train, "search": Search, "export": Export}[part](work, base)
        scenario.before("ref")
        events, end = observe(scenario.argv("ref"), Progress(part, scenario.folder("ref")), work / f"ref-{part}.log")
        if len(events) < 2:
            raise SystemExit(f"{part}: the reference made {len(events)} write(s); cannot place kills between writes")
        window = statistics.median(b - a for a, b in zip(events, events[1:]))
        runs = []
        for i in range(count):
            name = f"k{i}"
            scenario.before(name)
            how = kill_at(scenario.argv(name), Progress(part, scenario.folder(name)), rng.randint(1, len(events) - 1),
                          rng.uniform(0, window), SIGNALS[i % 3], work / f"{part}-{name}.log")
            runs.append(scenario.check(name, how))
        report[part] = {"reference_s": round(end, 2), "writes": len(events), "window_s": round(window, 2),
                        "runs": runs}
    return report


def print_report(found: dict) -> None:
    """The tables of `found` (the JSON line follows)."""
    if "inputs" in found:
        print("| verb | malformed inputs tried | handled with one line, nothing changed |\n|---|---|---|")
        for verb, (tried, handled) in found["inputs"]["by_verb"].items():
            print(f"| {verb} | {tried} | {handled} |")
        for failure in found["inputs"]["failures"]:
            print(f"  not handled: {failure}")
    for part, result in found.get("kills", {}).items():
        runs = result["runs"]
        hows = {h: sum(r["how"] == h for r in runs) for h in dict.fromkeys(r["how"] for r in runs)}
        print(f"{part}: reference {result['reference_s']} s, {result['writes']} writes; kills {hows}; "
              f"survived with nothing lost {sum(r['survived'] for r in runs)}/{len(runs)}")
        for run in runs:
            print("   ", json.dumps(run))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="killed runs per scenario")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill delays")
    parser.add_argument("--parts", default="inputs,train,search,export")
    parser.add_argument("--work", help="working folder (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="nas-reliability-"))
    work.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    base = work / "base"
    api.train(load_config(tiny_config(steps=8)), name="tiny", runs_dir=base, progress=False)
    found: dict = {}
    if "inputs" in parts:
        found["inputs"] = inputs(work, base)
    found["kills"] = kills(work, base, args.kills, args.seed, [p for p in parts if p != "inputs"])
    print_report(found)
    if not args.work:
        shutil.rmtree(work)
    return common.emit("reliability", found, argv)


if __name__ == "__main__":
    common.run(main)
