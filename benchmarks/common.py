"""What every benchmark shares: its threads, its timing loop, and the one JSON line it ends with.

A benchmark is a module run from the repository root, `python -m benchmarks.NAME [ARGS]`, listed
with its cost class in `benchmarks/__init__.py` (`python -m benchmarks` prints the list). Its
shape:

    from benchmarks import common

    def main(argv: list[str] | None = None) -> dict:
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        common.threads_argument(parser, default=1)
        args = parser.parse_args(argv)
        common.use_threads(args.threads)
        times = common.alternating_times({"plain": step_a, "elastic": step_b}, args.steps)
        figures = {"median_ms": {k: 1e3 * statistics.median(t) for k, t in times.items()}}
        print(...)                                            # the human-readable table
        return common.emit("NAME", figures, argv)              # the one JSON line, last

    if __name__ == "__main__":
        common.run(main)

A new benchmark also adds its entry (cost class, commands) to `BENCHMARKS` in
`benchmarks/__init__.py`. A step that needs a fresh batch per call takes it from a list made
beforehand (`ready = iter(batches)`; `lambda: trainer.train_one_step(*next(ready))`), so making
batches stays out of the timing; make `common.WARMUP + timed` of them.

- `alternating_times(steps, timed, warmup=WARMUP)`: seconds of each of `steps`' calls; `warmup`
  untimed rounds first, then `timed` timed rounds; the calls take turns within a round, the order
  reversed every other round, so all see the same machine load. `timed_steps` for one callable.
- `threads_argument(parser, default)` / `use_threads(n)`: a uniform `--threads` and torch's
  intra-op threads set from it (None keeps torch's, i.e. OMP_NUM_THREADS).
- `provenance()`: what `nas train` records in a run's environment.json (versions, git commit,
  CPU, GPU, threads) and the UTC date.
- `emit(name, figures, argv)`: prints `{"benchmark": NAME, **figures, "command": "python -m
  benchmarks.NAME ARGS", "provenance": {...}}` as one line and returns it. Machine facts belong
  in `provenance`, not in the figures.
- `run(main)`: calls `main()`; a `NasError` (bad input) becomes one line `NAME: message` on stderr
  and its exit code (2), as the `nas` CLI does; a parameter the command line gave as a flag is
  named by that flag.
"""
from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import time
from typing import Any, Callable, Hashable, Mapping, Sequence

import torch

from nas.core.errors import NasError
from nas.core.wording import Words, wording
from nas.engine.run_dir import environment

WARMUP = 3      # untimed calls before the timed ones: first-call allocations, caches, worker start


def alternating_times(steps: Mapping[Hashable, Callable[[], Any]], timed: int, warmup: int = WARMUP, *,
                      clock: Callable[[], float] = time.perf_counter,
                      sync: Callable[[], None] | None = None) -> dict[Hashable, list[float]]:
    """Seconds by `clock` of each call of `steps`' callables: `warmup` untimed rounds, then `timed`
    timed rounds; in each round every callable is called once, in turn, the order reversed every
    other round. `sync` (e.g. torch.cuda.synchronize) runs before each clock reading."""
    if timed < 1 or warmup < 0:
        raise ValueError(f"needs timed >= 1 and warmup >= 0, got timed={timed}, warmup={warmup}")
    sync = sync or (lambda: None)
    times: dict[Hashable, list[float]] = {key: [] for key in steps}
    order = list(steps.items())
    for round_ in range(warmup + timed):
        for key, step in (order if round_ % 2 == 0 else order[::-1]):
            if round_ < warmup:
                step()
                continue
            sync()
            started = clock()
            step()
            sync()
            times[key].append(clock() - started)
    return times


def timed_steps(step: Callable[[], Any], timed: int, warmup: int = WARMUP, **options: Any) -> list[float]:
    """`alternating_times` of one callable: the seconds of its `timed` calls after `warmup` untimed ones."""
    return alternating_times({"step": step}, timed, warmup, **options)["step"]


def threads_argument(parser: argparse.ArgumentParser, default: int | None) -> None:
    """Add `--threads` (torch intra-op threads; None keeps torch's, i.e. OMP_NUM_THREADS)."""
    parser.add_argument("--threads", type=int, default=default,
                        help=f"torch threads (default {default if default is not None else 'OMP_NUM_THREADS'})")


def use_threads(threads: int | None) -> int:
    """Set torch's intra-op threads to `threads` (unless None); the count now in effect."""
    if threads is not None:
        if threads < 1:
            raise SystemExit(f"--threads: must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def provenance() -> dict[str, Any]:
    """The machine and software of this process, as runs record them in environment.json, and the date."""
    return {**environment(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def command(name: str, argv: Sequence[str] | None = None) -> str:
    """The command line that reruns benchmark `name` with `argv` (default: this process's arguments)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return shlex.join(["python", "-m", f"benchmarks.{name}", *args])


def emit(name: str, figures: Mapping[str, Any], argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Print the benchmark's one JSON line (its name, `figures`, the command, the provenance); return it."""
    record = {"benchmark": name, **figures, "command": command(name, argv), "provenance": provenance()}
    print(json.dumps(record, default=str), flush=True)
    return record


def run(main: Callable[[], Any]) -> None:
    """Run a benchmark's `main()`: bad input (a NasError) is one line on stderr and exit code 2."""
    name = main.__module__.rsplit(".", 1)[-1]
    if name == "__main__":
        spec = sys.modules["__main__"].__spec__
        name = spec.name.rsplit(".", 1)[-1] if spec is not None else name
    words = ArgvWords(sys.argv[1:])
    try:
        with wording(words):
            main()
    except NasError as error:
        print(f"{name}: {error.render(words)}", file=sys.stderr)
        sys.exit(error.exit_code)


class ArgvWords(Words):
    """A benchmark's words for an error from below: a parameter the command line gave as a flag
    (`arch: ...` after `--arch X`) by that flag, the others by their Python names."""

    def __init__(self, argv: list[str]):
        self.given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}

    def _flag(self, name: str) -> str | None:
        flag = "--" + name.replace("_", "-")
        return flag if flag in self.given else None

    def param(self, name: str) -> str:
        return self._flag(name) or name

    def ref(self, name: str, value: str | None) -> str:
        flag = self._flag(name)
        if flag is None:
            return super().ref(name, value)
        return flag if value is None or value == "True" else f"{flag} {value}"
