"""Reading a published `torch.save` file's tensors without running code from it.

A weights-only load (`torch.load(weights_only=True)`) is tried first. Checkpoints written by
research code often pickle more than tensors (AttentiveNAS/AlphaNet save their `args`, a
dict subclass of their own, in PyTorch's legacy format); a weights-only load refuses them.
The second try unpickles with a restricted unpickler: it resolves only the globals a
weights-only load allows (tensor rebuilders, storages, dtypes, `OrderedDict`) and turns every
other global into `Inert`, a placeholder that accepts any arguments and state and keeps
nothing, so no constructor, `__setstate__` or function named by the file ever runs.
"""
from __future__ import annotations

import pickle
import types
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import _weights_only_unpickler

from nas.core.errors import CheckpointError, PathError, clip_words

ZIP_MAGIC = b"PK\x03\x04"       # torch.save's default format
PICKLE_PROTOCOL = b"\x80"        # its legacy format starts with a pickle (protocol 2 or later)


class Inert:
    """Stands for a pickled object of a class nas does not load: takes any arguments, state,
    items and list entries, and keeps none of them."""

    dump_patches = False        # what torch's legacy loader asks of a pickled module's class

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        del args, kwargs

    def __setstate__(self, state: Any) -> None:
        del state

    def __setitem__(self, key: Any, value: Any) -> None:
        del key, value

    def append(self, value: Any) -> None:
        del value

    def extend(self, values: Any) -> None:
        del values


class InertUnpickler(pickle.Unpickler):
    """An unpickler that resolves only weights-only globals; every other global is `Inert`."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = _weights_only_unpickler._get_allowed_globals()
        return allowed.get(f"{module}.{name}", Inert)


def _inert_load(file: Any, **kwargs: Any) -> Any:
    return InertUnpickler(file, **kwargs).load()


INERT_PICKLE = types.ModuleType("nas_inert_pickle")
INERT_PICKLE.Unpickler = InertUnpickler
INERT_PICKLE.load = _inert_load


def convert_command(path: Path) -> str:
    """The one-liner that rewrites a trusted checkpoint as a plain state dict."""
    return (f"python -c \"import torch; c = torch.load('{path}', map_location='cpu', weights_only=False); "
            f"s = c.state_dict() if hasattr(c, 'state_dict') else c['state_dict']; "
            f"torch.save({{'state_dict': s}}, 'converted.pth')\" (only for a file you trust)")


def read_published(path: str | Path) -> Any:
    """What the `torch.save` file at `path` holds, on the CPU, with every pickled Python object
    that is not a tensor or plain data replaced by an `Inert` placeholder.

    Raises `PathError` for a missing file and `CheckpointError` (one line) for a file that is
    no PyTorch checkpoint, or that cannot be read without running its code (with how to convert it).
    """
    path = Path(path)
    if not path.is_file():
        raise PathError(f"FILE: {path} is not a file")
    with open(path, "rb") as f:
        head = f.read(len(ZIP_MAGIC))
    if head != ZIP_MAGIC and not head.startswith(PICKLE_PROTOCOL):
        raise CheckpointError(f"FILE: {path} is not a PyTorch checkpoint (neither a zip archive nor a pickle)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "weights only" not in str(e).lower():
            raise CheckpointError(f"FILE: {path} is not a PyTorch checkpoint ({clip_words(str(e), 100)})") from e
    except Exception as e:       # torch raises many types on files that are no checkpoint
        raise CheckpointError(f"FILE: {path} is not a PyTorch checkpoint "
                              f"({clip_words(str(e) or type(e).__name__, 100)})") from e
    try:
        with warnings.catch_warnings():     # a pickled module's class, now `Inert`, "changed source"
            warnings.simplefilter("ignore", torch.serialization.SourceChangeWarning)
            return torch.load(path, map_location="cpu", weights_only=False, pickle_module=INERT_PICKLE)
    except Exception as e:
        raise CheckpointError(f"FILE: {path} pickles objects that cannot be read without running code from it "
                              f"({clip_words(str(e) or type(e).__name__, 80)}); convert it: "
                              f"{convert_command(path)}") from e
