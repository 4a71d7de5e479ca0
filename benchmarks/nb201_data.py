"""NAS-Bench-201 reference data for benchmarks and tests: where it lies and how to read it.

`../shared/data/nb201/` (beside the repository; absent from a user's fresh clone) holds the
benchmark's CIFAR-10 table (`nb201_cifar10.csv`: `index`, `arch` string, `cifar10_test_top1`)
and NASLib's zero-cost file (`naslib_zc_nb201_cifar10.json`: flops, params and proxy scores
of 725 archs). NASLib keys an arch by a tuple of op ids in the edge order 1<-0, 2<-0, 3<-0,
2<-1, 3<-1, 3<-2 (not the string's), ids 0 skip_connect, 1 none, 2 conv_3x3, 3 conv_1x1,
4 avg_pool_3x3.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

from nas.core.arch import Arch
from search_spaces.cell201 import Cell201Options, Cell201Space, edge_key



def _shared_data() -> Path:
    """`shared/data` beside the repository (or beside a folder above it: a worktree's checkout)."""
    repo = Path(__file__).resolve().parents[1]
    found = [p / "shared" / "data" for p in repo.parents if (p / "shared" / "data").is_dir()]
    return found[0] if found else repo.parent / "shared" / "data"


SHARED = _shared_data()
NB201_DIR = SHARED / "nb201"
TABLE = NB201_DIR / "nb201_cifar10.csv"
NASLIB_FILE = NB201_DIR / "naslib_zc_nb201_cifar10.json"
CIFAR10_JPEGS = SHARED / "cifar10-jpeg.tar.gz"
NASLIB_EDGES = ((1, 0), (2, 0), (3, 0), (2, 1), (3, 1), (3, 2))
NASLIB_OPS = ("skip_connect", "none", "conv_3x3", "conv_1x1", "avg_pool_3x3")


def paper_space(costs: str = "nb201") -> Cell201Space:
    """NAS-Bench-201's CIFAR-10 network as a `cell201` space (what `cifar10_nb201` builds)."""
    return Cell201Space(Cell201Options(image_size=32, channels=16, cells_per_stage=5, costs=costs), 3, 10)


def naslib_arch(key: str) -> Arch:
    """The raw (uncanonicalised) arch of a NASLib key such as `(0, 2, 3, 2, 3, 1)`."""
    ids = ast.literal_eval(key)
    return {edge_key(to, source): NASLIB_OPS[i] for (to, source), i in zip(NASLIB_EDGES, ids)}


def naslib_records(path: Path = NASLIB_FILE) -> dict[str, dict]:
    """NASLib's CIFAR-10 records by key (`flops`, `params`, proxies: `{"score", "time"}`)."""
    return json.loads(Path(path).read_text())["cifar10"]
