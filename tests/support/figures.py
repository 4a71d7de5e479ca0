"""A fixture for search tests that check records, not figures: the Pareto PNG and TensorBoard
figure are not drawn (matplotlib is most of a tiny search's time; tests/engine/searching/
test_search_runner.py checks the figures)."""
from __future__ import annotations

import pytest


@pytest.fixture
def no_figures(monkeypatch):
    """Searches in the test draw no Pareto figure (the files they write are otherwise the same)."""
    from nas.engine.searching import loop, pareto_report

    monkeypatch.setattr(pareto_report, "plot_pareto", lambda *args, **kwargs: None)
    monkeypatch.setattr(loop._Log, "figure", lambda *args, **kwargs: None)
