"""Figures written by the engine: matplotlib without a display, PNGs written atomically."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from nas.core.files import atomic_file


def pyplot() -> Any:
    """`matplotlib.pyplot` on the Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    return plt


def save_png(fig: Any, path: Path) -> None:
    """Lay out `fig`, write it to `path` as a PNG atomically, and close it."""
    fig.tight_layout()
    with atomic_file(path, "wb") as f:
        fig.savefig(f, dpi=100, format="png")
    pyplot().close(fig)
