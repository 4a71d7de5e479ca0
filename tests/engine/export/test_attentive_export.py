"""An `attentive_mbv3` export: no timm model rebuilds it, and it says so; torch.export and ONNX
hold it, and its metrics record the space's bicubic resizing."""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch
import torch.nn.functional as F

from nas import api, cli
from nas.core.config import load_config
from tests.support.tiny import tiny_config


ONNX_MISSING = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]


@pytest.mark.slow
@pytest.mark.skipif(bool(ONNX_MISSING), reason=f"ONNX export needs {', '.join(ONNX_MISSING)} (the onnx extra)")
def test_export_says_timm_cannot_rebuild_it_and_records_bicubic_resizing(tmp_path, capsys):
    config = tiny_config(steps=2)
    config["space"] = {"name": "attentive_mbv3", "options": {"resolutions": [20, 25], "head_widths": [16, 24]}}
    api.train(load_config(config), name="alpha", runs_dir=tmp_path / "runs", progress=False)
    run = api.load_run("alpha", tmp_path / "runs", device="cpu")
    out = tmp_path / "export"
    assert cli.main(["export", "alpha", "--runs-dir", str(tmp_path / "runs"), "--arch", "max", "--out", str(out),
                     "--format", "onnx"]) == 0
    assert "note: no timm.json: timm cannot rebuild this block" in capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["preprocessing"]["interpolation"] == "bicubic"
    assert "timm cannot rebuild this block" in metrics["timm"]
    assert not (out / "timm.json").exists()
    arch = run.space.canonical(run.space.max())
    size = run.space.input_size(arch)
    x = torch.rand(3, 1, 40, 40)
    program = torch.export.load(str(out / "model.pt2")).module()
    with run.evaluator.prepared(arch) as supernet, torch.no_grad():
        # the supernet resizes a larger image itself; the export is given it resized as metrics.json says
        resized = F.interpolate(x, size=(size, size), mode="bicubic", align_corners=False)
        assert torch.allclose(program(resized), supernet(x), atol=1e-5)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    (onnx_logits,) = session.run(None, {session.get_inputs()[0].name: resized.numpy()})
    with torch.no_grad():
        assert torch.allclose(torch.from_numpy(onnx_logits), program(resized), atol=1e-4)
