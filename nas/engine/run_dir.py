"""The run directory: where a run's config, checkpoints, logs, searches and exports live.

    runs/<name>/config.yaml        resolved config (authoritative on --resume)
    runs/<name>/environment.json   versions, git commit, CPU/GPU, threads
    runs/<name>/checkpoints/       last.pt, best.pt (atomic)
    runs/<name>/metrics.jsonl      validation accuracy of the monitored archs per epoch
    runs/<name>/tb/                TensorBoard events
    runs/<name>/search/<id>/       searches
    runs/<name>/export/<arch_id>/  exports
    runs/<name>/fidelity/<id>/     fidelity measurements (and fidelity/ground_truth/, their default cache)
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from nas.core.errors import RunError

DEFAULT_RUNS_DIR = "runs"


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


def cpu_model() -> str:
    """The CPU model name (from /proc/cpuinfo on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
