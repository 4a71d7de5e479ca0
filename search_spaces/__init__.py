"""Search spaces: elastic ops and the spaces built from them (importing registers them)."""
from search_spaces import attentive_mbv3, cell201, mobilenetv3, vit  # noqa: F401
from search_spaces.base import ArchSpace, Gate, LayerCost, Supernet

__all__ = ["ArchSpace", "Gate", "LayerCost", "Supernet"]
