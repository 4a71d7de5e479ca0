"""Latency measurement and lookup tables (no timing assertions: this CPU swings 2-10x)."""
from __future__ import annotations

import json
import random
import re

import pytest
import torch
from torch import nn

from nas.core.errors import RunError, SearchError
from nas.engine.latency.measure import device_record, measure
from nas.engine.latency.table import LatencyTable, build_table, table_archs, table_filename, write_latency_table
from tests.conftest import make_space, make_supernet

FAST = dict(warmup=1, repeats=3, threads=1)


@pytest.fixture(scope="module")
def space():
    return make_space("mobilenetv3", small=True)


@pytest.fixture(scope="module")
def supernet(space):
    return make_supernet(space)


@pytest.fixture(scope="module")
def archs(space):
    rng = random.Random(0)
    return [space.min(), space.max()] + [space.sample(rng) for _ in range(4)]


@pytest.fixture(scope="module")
def table(supernet, archs):
    return build_table(supernet, archs, "cpu", batch_size=2, fit_archs=3, **FAST)


def _check_record(record, device: str, threads: int, batch: int, repeats: int) -> None:
    assert len(record.samples) == repeats and all(s > 0 for s in record.samples)
    assert min(record.samples) <= record.median_ms <= record.p90_ms <= max(record.samples)
    assert record.device.device == device and record.device.name
    assert record.device.torch == torch.__version__
    assert (record.device.threads, record.device.dtype, record.device.batch_size) == (threads, "float32", batch)
    assert set(record.to_dict()) == {"median_ms", "p90_ms", "device"}


def test_measure_reports_median_and_p90_with_its_device():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(4))
    model(torch.zeros(1, 3, 12, 12))
    threads = torch.get_num_threads()
    record = measure(model, "cpu", batch_size=2, input_shape=(3, 12, 12), warmup=1, repeats=7, threads=1)
    _check_record(record, "cpu", 1, 2, 7)
    assert torch.get_num_threads() == threads
    assert next(model.parameters()).is_contiguous()  # the caller's model is not converted


def test_device_record_names_the_cpu():
    record = device_record("cpu", threads=3, dtype=torch.float16, batch_size=4)
    assert (record.device, record.threads, record.dtype, record.batch_size) == ("cpu", 3, "float16", 4)
    assert record.name and record.torch == torch.__version__


def test_table_has_one_entry_per_distinct_layer_configuration(space, archs, table):
    keys = {layer.key for arch in archs for layer in space.layers(arch)}
    assert set(table.entries) == keys
    assert sum(len(space.layers(a)) for a in archs) > len(keys)  # some layers are shared
    for entry in table.entries.values():
        assert entry["median_ms"] > 0 and entry["p90_ms"] >= entry["median_ms"]
        assert len(entry["in_shape"]) == 3
    assert table.device.batch_size == 2 and table.device.threads == 1
    assert 1 <= len(table.fit) <= 3 and table.constant_ms >= 0


def test_prediction_is_the_sum_of_entries_plus_the_constant(space, archs, table):
    for arch in archs:
        expected = sum(table.entries[layer.key]["median_ms"] for layer in space.layers(arch)) + table.constant_ms
        assert table.predict(space, arch) == pytest.approx(expected)
    for fit in table.fit:
        assert fit["predicted_ms"] == pytest.approx(fit["layers_ms"] + table.constant_ms)


def test_unknown_layer_asks_to_rebuild_the_table(space, table):
    missing = next(a for a in space.enumerate() if any(l.key not in table.entries for l in space.layers(a)))
    rebuild = "`nas.api.latency_table(nas.api.load_run(RUN), device='cpu', batch=2)`"
    with pytest.raises(SearchError, match="no entry for layer .*" + re.escape(rebuild)):
        table.predict(space, missing)


def test_table_file_round_trip(space, table, tmp_path):
    assert table_filename("cpu", 1) == "cpu-b1.json" and table_filename("cuda:0", 8) == "cuda0-b8.json"
    path = table.save(tmp_path / "cpu-b2.json")
    data = json.loads(path.read_text())
    assert {"format_version", "space", "space_fingerprint", "device", "constant_ms", "entries", "fit"} <= set(data)
    loaded = LatencyTable.load(path)
    assert loaded.entries == table.entries and loaded.device == table.device
    assert loaded.predict(space, space.max()) == pytest.approx(table.predict(space, space.max()))
    loaded.check_space(space)
    with pytest.raises(SearchError, match="built for another space"):
        loaded.check_space(make_space("mobilenetv3"))
    with pytest.raises(RunError, match="no latency table"):
        LatencyTable.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"format_version": 1}')
    with pytest.raises(RunError, match="not a latency table"):
        LatencyTable.load(tmp_path / "bad.json")


def test_cover_archs_reach_every_layer_configuration(space):
    cover = table_archs(space)
    every = {layer.key for arch in space.enumerate() for layer in space.layers(arch)}
    assert {layer.key for arch in cover for layer in space.layers(arch)} == every
    assert len(cover) < 0.05 * space.size()
    large = make_space("mobilenetv3")  # too large to list: sampled until no new key appears
    cover = table_archs(large, patience=300)
    keys = {layer.key for arch in cover for layer in large.layers(arch)}
    assert {layer.key for layer in large.layers(large.max())} <= keys


def test_write_latency_table_covers_the_space(tmp_path):
    space = make_space("mobilenetv3", small=True, resolutions=(20,), kernel_sizes=(3,))
    path, table = write_latency_table(make_supernet(space), tmp_path, "cpu", 1, fit_archs=2, **FAST)
    assert path == tmp_path / "cpu-b1.json" and LatencyTable.load(path).entries == table.entries
    every = {layer.key for arch in space.enumerate() for layer in space.layers(arch)}
    assert set(table.entries) == every


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@cuda
def test_measure_on_cuda_uses_events(monkeypatch):
    from nas.engine.latency import measure as latency

    events, elapsed = [], []

    class RecordingEvent(torch.cuda.Event):
        def __new__(cls, *args, **kwargs):
            event = super().__new__(cls, *args, **kwargs)
            events.append((event, kwargs.get("enable_timing", False)))
            return event

        def elapsed_time(self, end):
            elapsed.append(super().elapsed_time(end))
            return elapsed[-1]

    def no_cpu_timer(*args):
        raise AssertionError("the CPU timer ran for a CUDA device")

    monkeypatch.setattr(torch.cuda, "Event", RecordingEvent)
    monkeypatch.setattr(latency, "_time_cpu", no_cpu_timer)
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
    record = measure(model, "cuda:0", batch_size=4, input_shape=(3, 32, 32), warmup=3, repeats=10)
    _check_record(record, "cuda:0", torch.get_num_threads(), 4, 10)
    assert record.device.name == torch.cuda.get_device_name(0)
    assert len(events) == 20 and all(timing for _, timing in events)     # a start and an end per run
    assert record.samples == elapsed and all(event.query() for event, _ in events)


@pytest.mark.gpu
@cuda
def test_table_on_cuda(space, supernet, archs, tmp_path):
    table = build_table(supernet, archs[:3], "cuda:0", batch_size=1, warmup=2, repeats=5, fit_archs=2)
    assert set(table.entries) == {layer.key for arch in archs[:3] for layer in space.layers(arch)}
    assert table.device.name == torch.cuda.get_device_name(0)
    path = table.save(tmp_path / table_filename("cuda:0", 1))
    assert path.name == "cuda0-b1.json" and LatencyTable.load(path).device.device == "cuda:0"
