"""Search spaces: elastic ops and the spaces built from them (importing registers them)."""
from search_spaces import mobilenetv3  # noqa: F401
from search_spaces.base import ArchSpace, Gate, LayerCost, Supernet

__all__ = ["ArchSpace", "Gate", "LayerCost", "Supernet"]
