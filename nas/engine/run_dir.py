"""The run directory: where a run's config, checkpoints, logs, searches and exports live, and
the checks `nas train` makes before it creates or continues one (name, resume point, room, lock).

    runs/<name>/config.yaml        resolved config (authoritative on --resume)
    runs/<name>/environment.json   versions, git commit, CPU/GPU, threads, ranks, start time
                                   (and `earlier_starts`, each a resumed run's earlier record)
    runs/<name>/imported.json      a run made by `nas import`: the file, format and width read
    runs/<name>/checkpoints/       last.pt, best.pt (atomic)
    runs/<name>/metrics.jsonl      validation accuracy of the monitored archs per epoch
    runs/<name>/tb/                TensorBoard events
    runs/<name>/search/<id>/       searches
    runs/<name>/export/<arch_id>/  exports
    runs/<name>/fidelity/<id>/     fidelity measurements (and fidelity/ground_truth/, their default cache)
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from nas.core import yaml_io
from nas.core.config import RunConfig
from nas.core.errors import ConfigError, RunError, clip
from nas.core.files import check_writable, write_json, write_text
from nas.engine.checkpoint import LAST, tensors
from nas.engine.devices import cpu_model
from nas.core.locks import LOCK_FILE, folder_lock

DEFAULT_RUNS_DIR = "runs"
_NAME = re.compile(r"[A-Za-z0-9._-]+")


def check_name(name: str, flag: str = "name") -> str:
    """`name` if it is a plain folder name (`[A-Za-z0-9._-]+`, not `.` or `..`); else `RunError`.

    Run names (and search folder names taken from `--study`) become one folder under
    `runs/`, never a path that leaves it or reaches into another run.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise RunError(f"{flag}: {clip(name)!r} is not a valid name: use letters, digits, '.', '_' and '-' "
                       f"(no '/', not '.' or '..')")
    return name


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def tb(self) -> Path:
        return self.root / "tb"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def environment(self) -> Path:
        return self.root / "environment.json"

    @property
    def imported(self) -> Path:
        """Where the weights came from, in a run made by `nas import` (absent in a trained run)."""
        return self.root / "imported.json"

    def search(self, ident: str) -> Path:
        return self.root / "search" / ident

    def export(self, ident: str) -> Path:
        return self.root / "export" / ident

    def fidelity(self, ident: str) -> Path:
        return self.root / "fidelity" / ident


def find_run(path_or_name: str | Path, runs_dir: str | Path = DEFAULT_RUNS_DIR) -> RunDir:
    """An existing run by directory path or by name under `runs_dir`."""
    candidates = [Path(path_or_name), Path(runs_dir) / str(path_or_name)]
    for candidate in candidates:
        if (candidate / "config.yaml").is_file():
            return RunDir(candidate)
    where = " or ".join(str(c) for c in dict.fromkeys(candidates))
    raise RunError(f"RUN: no run at {where} (a run directory holds config.yaml; train one with nas train)")


def _has_files(folder: Path) -> bool:
    return folder.is_dir() and any(p.name != LOCK_FILE for p in folder.iterdir())


def check_resume(run: RunDir, resume: bool, checkpoint: str = LAST) -> str | None:
    """What `nas train` may do with `run`: the checkpoint to resume from, or None to start at step 0.

    A new run must not exist yet; `--resume` needs `checkpoints/<checkpoint>`, except for a
    run stopped before its first checkpoint and epoch (nothing to lose: it starts over).
    """
    if not resume:
        if checkpoint != LAST:
            raise ConfigError("only with {resume=True} (which checkpoint to continue from)", param="checkpoint")
        if _has_files(run.root):
            raise _exists(run)
        return None
    check_name(checkpoint, "checkpoint")
    if not run.config.is_file():
        raise RunError(f"no run at {run.root} to resume (train it first without {{resume=True}})", param="resume")
    if (run.checkpoints / checkpoint).is_file():
        return checkpoint
    present = sorted(p.name for p in run.checkpoints.glob("*.pt")) if run.checkpoints.is_dir() else []
    logged = run.metrics.is_file() and run.metrics.stat().st_size > 0
    if checkpoint == LAST and not present and not logged:
        return None
    there = ", ".join(present) if present else "no checkpoint, but metrics.jsonl"
    hint = f"resume from {present[-1]} with {{resume=True}} {{checkpoint={present[-1]}}}, or " if present else ""
    raise RunError(f"{run.checkpoints} has no {checkpoint} (there: {there})", param="resume",
                   fix=hint + "start a new run with another {name}")


def _exists(run: RunDir) -> RunError:
    return RunError(f"{run.root} already exists", param="name",
                    fix="continue it with {resume=True} or choose another {name}")


def _checkpoint_bytes(weights: Mapping[str, Any]) -> int:
    """Room for last.pt, best.pt and one being written, with optimiser states of up to 2 slots."""
    return 3 * 3 * sum(t.numel() * t.element_size() for _, t in tensors(weights))


@contextmanager
def open_run(run: RunDir, config: RunConfig, resume: bool, weights: Mapping[str, Any]) -> Iterator[None]:
    """Rank 0: check the folder can hold the run (with `weights`, the strategy's model state),
    lock it and write config.yaml (a new run)."""
    check_writable(run.root, "runs_dir", _checkpoint_bytes(weights))
    with folder_lock(run.root, "run"):
        if not resume:
            if run.config.exists():    # another process created it since check_resume
                raise _exists(run)
            write_text(run.config, f"# nas train {run.config} --name {run.name} --resume\n"
                       + yaml_io.dumps(config.to_dict()))
        yield


def record_start(run: RunDir, resumed: bool, ranks: int) -> None:
    """Rank 0, once the run is ready to train (a resume's checkpoint loaded): write
    environment.json with the `ranks` training together, the start's UTC time and, on a resume,
    the records of the run's earlier starts. A refused resume leaves the file as it was."""
    earlier = _earlier_starts(run) if resumed else []
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    write_json(run.environment, {**environment(), "ranks": ranks, "started": started,
                                 **({"earlier_starts": earlier} if earlier else {})})


def _earlier_starts(run: RunDir) -> list[dict]:
    """The environment records of a resumed run's earlier starts, oldest first: a run resumed
    at another commit, on another machine or with other ranks keeps what each part ran on."""
    try:
        previous = json.loads(run.environment.read_text())
    except (OSError, ValueError):
        return []
    return [*previous.pop("earlier_starts", []), previous]


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except ImportError:
        return None


def environment() -> dict:
    """Versions, git commit, hardware and threads of this process."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                                cwd=Path(__file__).parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"python": sys.version.split()[0], "torch": torch.__version__, "timm": _version("timm"),
            "optuna": _version("optuna"), "numpy": _version("numpy"), "git_commit": commit,
            "platform": platform.platform(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
