"""Plain-dict checkpoints: checked, written atomically, verified on load with `weights_only=True`.

A checkpoint holds `format_version`, `digest`, `config` (the resolved config as plain data),
`model` (the unwrapped state dict), `optimizer`, `scheduler`, `strategy`, `step`, `epoch` and
`rng` (generator states as tensors). Writing goes to a temporary file in the same directory,
is fsynced, then renamed over the target, so a crash never leaves half a file.

Format 2 adds `digest`, `sha256:<hex>` of the payload (every other entry, walked in order:
keys, each tensor's dtype, shape and bytes, the repr of every other value), checked on load:
bytes changed on disk after the write are reported instead of evaluated. Format-1 checkpoints
(written before the digest existed) still load, unverified. A state holding NaN or infinity
in a floating-point tensor is never written, and one found on load is refused.
"""
from __future__ import annotations

import hashlib
import io
import pickle
import re
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from nas.core.config import RunConfig, load_config
from nas.core.errors import CheckpointError, ConfigError, TrainingDiverged, clip, clip_words, plural
from nas.core.files import atomic_file

FORMAT_VERSION = 2
LAST = "last.pt"
BEST = "best.pt"
_ZIP_MAGIC = b"PK\x03\x04"     # torch.save writes a zip archive
_SHOWN = 3                     # keys named in a message


def tensors(value: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(dotted path, tensor) of every tensor inside nested dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from tensors(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from tensors(item, f"{prefix}[{index}]")


def non_finite_tensors(state: Any) -> list[str]:
    """Paths of the floating-point tensors in `state` that hold NaN or infinity."""
    return [path for path, t in tensors(state)
            if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all())]


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    elif isinstance(value, Mapping):
        digest.update(f"D{len(value)}".encode())
        for key, item in value.items():
            _feed(digest, key)
            _feed(digest, item)
    elif isinstance(value, (list, tuple)):
        digest.update(f"{type(value).__name__[0]}{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"S{type(value).__name__}:{value!r};".encode())


def payload_digest(state: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of every entry of `state` but `digest` (see the module docstring)."""
    digest = hashlib.sha256()
    _feed(digest, {key: value for key, value in state.items() if key != "digest"})
    return f"sha256:{digest.hexdigest()}"


def weights_digest(model_state: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of a model's state dict alone (names, dtypes, shapes, bytes): what identifies
    a run's trained weights wherever its folder lies (a retrained run at the same step has others)."""
    digest = hashlib.sha256()
    _feed(digest, dict(model_state))
    return f"sha256:{digest.hexdigest()}"


def save_checkpoint(state: dict[str, Any], path: str | Path) -> Path:
    """Write `state` to `path` atomically, with its digest; refuses NaN or infinite tensors."""
    path = Path(path)
    bad = non_finite_tensors(state)
    if bad:
        raise TrainingDiverged(f"{path}: not written: {plural(len(bad), 'tensor')} with NaN or infinity "
                               f"(first: {', '.join(bad[:_SHOWN])})")
    payload = {"format_version": FORMAT_VERSION, **state}
    payload["digest"] = payload_digest(payload)
    buffer = io.BytesIO()       # serialised first: torch.save on a full disk raises an opaque RuntimeError
    torch.save(payload, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, "wb", durable=True) as f:
        f.write(buffer.getbuffer())
    return path


def fallback_hint(path: Path) -> str:
    """What to try instead of the checkpoint at `path`: the run's other one, if it exists."""
    other = path.with_name(BEST if path.name != BEST else LAST)
    if other.is_file():
        return f"use the other checkpoint with {{checkpoint={other.name}}}"
    return f"{path.parent} holds no other checkpoint; train the run again"


def _unpickle(path: Path) -> Any:
    with open(path, "rb") as f:
        head = f.read(len(_ZIP_MAGIC))
    if head != _ZIP_MAGIC:
        kind = "an empty file" if not head else "not a PyTorch checkpoint (no zip archive)"
        raise CheckpointError(f"{path}: {kind}; give a checkpoint written by nas train")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "weights only" not in str(e).lower():
            raise CheckpointError(f"{path}: unreadable checkpoint (truncated or corrupt?): {clip_words(str(e))}; "
                                  f"{fallback_hint(path)}") from e
        found = re.search(r"GLOBAL (\S+)", str(e))
        what = f" (it pickles {found.group(1)})" if found else ""
        raise CheckpointError(f"{path}: not a weights-only checkpoint{what}: nas loads only tensors and plain "
                              f"data, never pickled Python objects") from e
    except Exception as e:  # torch raises many types on damaged archives (RuntimeError, KeyError...)
        first = (str(e) or type(e).__name__).split(". ")[0]    # miniz adds sentences of advice
        raise CheckpointError(f"{path}: unreadable checkpoint (truncated or corrupt?): {clip_words(first)}; "
                              f"{fallback_hint(path)}") from e


def checkpoint_step(path: str | Path) -> int:
    """The training step a checkpoint was written at, read without loading or verifying its
    tensors (memory-mapped): what a run's summary shows; `load_checkpoint` verifies."""
    return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["step"])


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load and verify a checkpoint written by `save_checkpoint` (format 1: unverified).

    Every problem raises `CheckpointError` naming the file: missing, not a checkpoint, pickled
    objects, damaged (digest mismatch), newer format, NaN or infinite tensors.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint file")
    state = _unpickle(path)
    version = state.get("format_version") if isinstance(state, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError(f"{path}: not a nas checkpoint (no format_version)")
    if version > FORMAT_VERSION:
        raise CheckpointError(f"{path}: format_version {version} is newer than this nas "
                              f"({FORMAT_VERSION}); upgrade nas")
    if version >= 2 and state.get("digest") != payload_digest(state):
        problem = "has no digest" if "digest" not in state else "does not match its digest"
        raise CheckpointError(f"{path}: {problem}: the file changed after it was written (damaged on disk?); "
                              f"{fallback_hint(path)}")
    bad = non_finite_tensors(state)
    if bad:
        raise CheckpointError(f"{path}: {plural(len(bad), 'tensor')} with NaN or infinity (first: {bad[0]}): "
                              f"it was saved after training diverged; {fallback_hint(path)}")
    return state


def state_dict_mismatch(expected: Mapping[str, torch.Tensor], given: Any) -> str:
    """What differs between a module's `state_dict()` and a loaded one: the first missing,
    unexpected and mis-shaped keys ('' when the keys and shapes agree)."""
    if not isinstance(given, Mapping):
        return f"the weights are a {type(given).__name__}, not a mapping of names to tensors"
    problems = []
    missing = [k for k in expected if k not in given]
    unexpected = [k for k in given if k not in expected]
    shapes = [f"{k} {list(given[k].shape)} vs {list(expected[k].shape)} here" for k in expected
              if k in given and isinstance(given[k], torch.Tensor) and given[k].shape != expected[k].shape]
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("other shape", shapes)):
        if keys:
            more = f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
            problems.append(f"{label}: {', '.join(keys[:_SHOWN])}{more}")
    return "; ".join(problems)


def mismatch_detail(expected: Mapping[str, torch.Tensor], given: Any, error: BaseException) -> str:
    """Why loading `given` into a model whose state dict is `expected` failed with `error`: the
    keys and shapes that differ, or the error in one line when they agree."""
    detail = state_dict_mismatch(expected, given)
    return detail if detail else f"{type(error).__name__}: {clip_words(str(error))}"


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def config_differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """`key: A in the checkpoint, B now` for every dotted key whose value differs."""
    if isinstance(stored, Mapping):
        try:   # the same defaults on both sides, whatever version wrote the checkpoint
            stored = load_config(dict(stored)).to_dict()
        except (ConfigError, TypeError):
            pass
    old, new = _flatten(stored), _flatten(current)
    return [f"{key}: {clip(old.get(key), 30)} in the checkpoint, {clip(new.get(key), 30)} now"
            for key in dict.fromkeys([*old, *new]) if old.get(key) != new.get(key)]


def check_config(state: Mapping[str, Any], config: RunConfig, path: Path, config_path: Path) -> None:
    """Refuse a checkpoint trained with another config than the run's `config.yaml` (names the keys)."""
    if "config" not in state:
        return
    # what a search asks and what an export ships are decided after training: editing them never
    # invalidates the weights
    differences = [d for d in config_differences(state["config"], config.to_dict())
                   if not d.startswith(("export.", "search."))]
    if differences:
        more = f" and {len(differences) - _SHOWN} more" if len(differences) > _SHOWN else ""
        raise CheckpointError(f"{path}: trained with another config than {config_path} "
                              f"({'; '.join(differences[:_SHOWN])}{more}); restore {config_path.name} "
                              f"or train a new run")


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
