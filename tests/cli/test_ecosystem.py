"""What users of timm, Optuna and TensorBoard expect: typed results with JSON on the CLI, a
timm `pretrained_cfg` in exports, an optional ONNX export, TensorBoard config/hparams/figures."""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from nas import api, cli
from nas.core import yaml_io
from nas.core.errors import NasError
from nas.core.pareto import front
from nas.engine.latency import table as latency
from nas.engine.evaluator import EvalResult
from nas.engine.export import ExportResult
from tests.support.tiny import tiny_config

ONNX_MISSING = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, dict]:
    """A tiny run trained through `nas train --json`; returns the runs directory and the JSON printed."""
    root = tmp_path_factory.mktemp("eco")
    config = root / "tiny.yaml"
    config.write_text(yaml_io.dumps(tiny_config(steps=8)))
    runs = root / "runs"
    capture = root / "stdout.json"
    with open(capture, "w") as out, contextlib.redirect_stdout(out):
        code = cli.main(["train", str(config), "--name", "tiny", "--runs-dir", str(runs), "--quiet", "--json",
                         "--device", "cpu"])
    assert code == 0
    return runs, json.loads(capture.read_text())


@pytest.fixture(scope="module")
def exported_min(trained, tmp_path_factory) -> tuple[ExportResult, Path]:
    runs, _ = trained
    out = tmp_path_factory.mktemp("export") / "min"
    return api.export_subnet(api.load_run("tiny", runs, device="cpu"), "min", out), out


def _json(capsys, argv: list[str]) -> dict:
    assert cli.main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_train_json_is_the_final_summary(trained):
    runs, summary = trained
    last = json.loads((runs / "tiny" / "metrics.jsonl").read_text().splitlines()[-1])
    state = torch.load(runs / "tiny" / "checkpoints" / "last.pt", weights_only=True)
    assert summary["step"] == state["step"] == 8
    assert summary["epoch"] == last["epoch"]
    assert summary["val_top1"] == {k[len("val_top1_"):]: v for k, v in last.items() if k.startswith("val_top1_")}
    assert {"min", "max"} <= set(summary["val_top1"])
    assert summary["run"] == str(runs / "tiny") and summary["checkpoint"].endswith("last.pt")


@pytest.mark.slow
def test_typed_results_match_their_json(trained, exported_min, capsys):
    runs, _ = trained
    run = api.load_run("tiny", runs, device="cpu")
    result = api.evaluate(run, "min", "val")
    assert isinstance(result, EvalResult) and result.to_json()["top1"] == result.top1
    printed = _json(capsys, ["eval", "tiny", "--runs-dir", str(runs), "--arch", "min", "--json", "--device", "cpu"])
    assert printed == result.to_json()
    exported, out = exported_min
    assert isinstance(exported, ExportResult) and exported.dir == out and exported.arch_id == result.arch_id
    metrics = json.loads((out / "metrics.json").read_text())
    assert {k: v for k, v in exported.to_json().items() if k != "dir"} == metrics
    assert (exported.val_top1, exported.macs) == (metrics["val_top1"], metrics["macs"])


@pytest.mark.slow
def test_timm_resolve_data_config_gives_the_export_preprocessing(exported_min):
    from timm.data import resolve_data_config

    from search_spaces.timm_models import load_timm_export

    _, out = exported_min
    pre = json.loads((out / "metrics.json").read_text())["preprocessing"]
    config = resolve_data_config(model=load_timm_export(out))
    size = pre["resolution"]
    assert size == 20       # the min arch's resolution, not the 28 of the images
    assert list(config["input_size"]) == [1, size, size]
    assert config["interpolation"] == pre["interpolation"] == "bilinear"
    assert list(config["mean"]) == pre["mean"] and list(config["std"]) == pre["std"]
    assert pre["mean"] != [0.485, 0.456, 0.406]
    assert config["crop_pct"] == 1.0      # the whole image is resized, nothing cropped


def test_onnx_export_without_its_packages_is_one_line_naming_them(trained, capsys, tmp_path, monkeypatch):
    import importlib.util

    from nas.engine import onnx_file

    real = importlib.util.find_spec
    monkeypatch.setattr(onnx_file.importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript"
                        else real(name, *a))      # as on a machine without the onnx extra's onnxscript
    runs, _ = trained
    code = cli.main(["export", "tiny", "--runs-dir", str(runs), "--arch", "min", "--format", "onnx",
                     "--out", str(tmp_path / "x"), "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--format onnx: needs onnxscript" in err and "install the onnx extra" in err, err
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
@pytest.mark.skipif(bool(ONNX_MISSING), reason=f"ONNX export needs {', '.join(ONNX_MISSING)} (the onnx extra)")
def test_onnx_export_computes_the_supernet_subnet(trained, tmp_path):
    import onnxruntime

    runs, _ = trained
    run = api.load_run("tiny", runs, device="cpu")
    for arch_name in ("min", "max"):
        out = tmp_path / arch_name
        record = api.export_subnet(run, arch_name, out, "onnx")
        arch = api.resolve_arch(run.space, arch_name)
        size = run.space.input_size(arch)
        images = torch.randn(5, 1, size, size, generator=torch.Generator().manual_seed(1))
        with run.evaluator.prepared(arch) as supernet:
            expected = supernet.eval()(images)
        session = onnxruntime.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
        (got,) = session.run(None, {session.get_inputs()[0].name: images.numpy()})
        assert torch.allclose(torch.from_numpy(got), expected, atol=1e-4), record.arch_id


def test_search_result_front_trials_and_dataframe(trained, tmp_path):
    runs, _ = trained
    run = api.load_run("tiny", runs, device="cpu")
    result = api.search(run, "random", trials=4, out=tmp_path / "s", progress=False)
    lines = [json.loads(line) for line in (tmp_path / "s" / "results.jsonl").read_text().splitlines()]
    assert result.trials == sorted(lines, key=lambda r: r["trial"])
    assert result.front == front(lines, "macs")
    assert [r["arch_id"] for r in result.front] == [
        p["arch_id"] for p in json.loads((tmp_path / "s" / "pareto.json").read_text())["fronts"]["macs"]]
    if importlib.util.find_spec("pandas") is None:
        with pytest.raises(NasError, match="needs pandas, which is not installed"):
            result.to_dataframe()
    else:
        frame = result.to_dataframe()
        assert len(frame) == 4 and list(frame["val_top1"]) == [r["val_top1"] for r in result.trials]
        assert all(f"arch.{key}" in frame.columns for key in result.best)
    events = _tensorboard(tmp_path / "s" / "tb")
    assert "search/pareto" in events.Tags()["images"]


def test_latency_table_json(trained, capsys, monkeypatch):
    runs, _ = trained
    monkeypatch.setattr(latency, "write_latency_table",
                        functools.partial(latency.write_latency_table, warmup=1, repeats=3, fit_archs=2))
    printed = _json(capsys, ["latency-table", "tiny", "--runs-dir", str(runs), "--device", "cpu", "--threads", "1",
                             "--quiet", "--json"])
    table = json.loads(Path(printed["path"]).read_text())
    assert Path(printed["path"]) == runs / "tiny" / "latency" / "cpu-b1.json"
    assert printed["entries"] == len(table["entries"]) > 0
    assert printed["device"] == table["device"] and printed["constant_ms"] == table["constant_ms"]


def _tensorboard(path: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(path), size_guidance={"tensors": 0, "images": 0, "scalars": 0})
    events.Reload()
    return events


def test_tensorboard_has_the_config_and_final_hparams(trained):
    from tensorboard.plugins.hparams import plugin_data_pb2

    runs, summary = trained
    events = _tensorboard(runs / "tiny" / "tb")
    (text,) = events.Tensors("config/text_summary")
    config = text.tensor_proto.string_val[0].decode()
    assert "    train:" in config and "steps: 8" in config
    hparams = events.PluginTagToContent("hparams")
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(hparams)
    for role in ("min", "max"):
        (point,) = events.Scalars(f"hparams/val_top1_{role}")
        assert point.value == pytest.approx(summary["val_top1"][role]) and point.step == 8
    start = plugin_data_pb2.HParamsPluginData.FromString(hparams["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["train.steps"].number_value == 8
    assert start.hparams["space.name"].string_value == "mobilenetv3"
