"""`python -m benchmarks`: every benchmark's commands with their cost class; `--run` then runs the
quick ones (seconds and minutes classes, needing nothing a fresh clone lacks), one at a time."""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from benchmarks import BENCHMARKS, Command

ROOT = Path(__file__).resolve().parents[1]


def command_line(name: str, command: Command) -> str:
    return " ".join(["python -m", f"benchmarks.{name}", command.args]).rstrip()


def listing() -> str:
    """One line per command: its cost class, the command, and what it needs if anything."""
    lines = [f"{'cost':8s} command (* = run by make bench)"]
    for name, commands in BENCHMARKS.items():
        for command in commands:
            needs = f"   [needs {command.needs}]" if command.needs else ""
            lines.append(f"{command.cost:8s} {'*' if command.quick else ' '} {command_line(name, command)}{needs}")
    return "\n".join(lines)


def run_quick() -> list[str]:
    """Run every quick command in its own process from the repository root; the ones that failed."""
    failed = []
    for name, commands in BENCHMARKS.items():
        for command in commands:
            if not command.quick:
                continue
            print(f"\n== {command_line(name, command)}", flush=True)
            done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *shlex.split(command.args)], cwd=ROOT)
            if done.returncode != 0:
                failed.append(f"{command_line(name, command)} (exit {done.returncode})")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="then run the quick ones (make bench)")
    args = parser.parse_args(argv)
    print(listing(), flush=True)
    if not args.run:
        return 0
    failed = run_quick()
    for line in failed:
        print(f"failed: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
