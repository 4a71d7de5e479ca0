"""Plain-dict checkpoints, written atomically and loaded with `weights_only=True`.

A checkpoint holds `format_version`, `config` (the resolved config as plain
data), `model` (the unwrapped state dict), `optimizer`, `scheduler`, `strategy`, `step`,
`epoch` and `rng` (generator states as tensors). Writing goes to a temporary file in the same
directory, is fsynced, then renamed over the target, so a crash never leaves half a file.
"""
from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from nas.core.errors import CheckpointError
from nas.core.files import atomic_file

FORMAT_VERSION = 1
LAST = "last.pt"
BEST = "best.pt"


def save_checkpoint(state: dict[str, Any], path: str | Path) -> Path:
    """Write `state` to `path` atomically (temporary file, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, "wb", durable=True) as f:
        torch.save({"format_version": FORMAT_VERSION, **state}, f)
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint written by `save_checkpoint`; problems raise `CheckpointError` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, pickle.UnpicklingError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: unreadable checkpoint (truncated or corrupt?): {first[:120]}") from e
    if not isinstance(state, dict) or "format_version" not in state:
        raise CheckpointError(f"{path}: not a nas checkpoint (no format_version)")
    if state["format_version"] > FORMAT_VERSION:
        raise CheckpointError(f"{path}: format_version {state['format_version']} is newer than this nas "
                              f"({FORMAT_VERSION}); upgrade nas")
    return state


def rng_state() -> dict[str, Any]:
    """States of torch's global generators (CPU and CUDA) as tensors."""
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore `rng_state()`."""
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
