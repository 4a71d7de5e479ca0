"""The whole product through the CLI on real data: train -> search -> export, in one process."""
from __future__ import annotations

import json

import pytest
import torch

from nas import cli
from nas.core import yaml_io
from nas.core.arch import read_arch_file
from tests.support.tiny import tiny_config


@pytest.mark.slow
def test_train_search_export_through_the_cli(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    # as the shipped configs do, the export fine-tunes the chosen subnet (here 4 steps)
    config.write_text(yaml_io.dumps({**tiny_config(steps=24), "export": {"finetune": {"length": 4}}}))
    runs = str(tmp_path / "runs")
    assert cli.main(["train", str(config), "--name", "e2e", "--runs-dir", runs, "--quiet", "--device", "cpu"]) == 0
    assert cli.main(["search", "e2e", "--runs-dir", runs, "--searcher", "evolution", "--max-macs", "50%",
                     "--trials", "8", "--json", "--quiet", "--device", "cpu"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert cli.main(["space", str(config), "--json"]) == 0
    space = json.loads(capsys.readouterr().out)
    budget = space["macs"]["min"] + 0.5 * (space["macs"]["max"] - space["macs"]["min"])
    assert found["macs"] <= budget
    best = f"{found['dir']}/best.yaml"
    assert read_arch_file(best) == found["best"]
    lines = [json.loads(line) for line in open(f"{found['dir']}/results.jsonl")]
    assert len(lines) == 8 and len({line["arch_id"] for line in lines}) == 8
    assert found["score"] == "naswot"        # auto, a fine-tuned export, no fidelity summary: mobilenetv3's default
    assert max(line["score_value"] for line in lines) == found["score_value"]

    # re-running the same command evaluates nothing new
    assert cli.main(["search", "e2e", "--runs-dir", runs, "--max-macs", "50%", "--trials", "8", "--quiet",
                     "--device", "cpu"]) == 0
    assert "(8 archs evaluated, 0 new; optimised for accuracy after training alone" in capsys.readouterr().out

    out = tmp_path / "winner"
    assert cli.main(["export", "e2e", "--runs-dir", runs, "--arch", best, "--out", str(out), "--json",
                     "--device", "cpu"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["arch_id"] == found["arch_id"] and exported["macs"] == found["macs"]
    assert exported["shipped"] == "finetuned" and exported["finetune"]["steps"] == 4
    model = torch.export.load(str(out / "model.pt2")).module()
    size = found["best"]["resolution"]
    assert model(torch.randn(3, 1, size, size)).shape == (3, 10)


@pytest.mark.slow
def test_latency_table_cli_and_latency_budget(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml_io.dumps(tiny_config(steps=4)))
    runs = str(tmp_path / "runs")
    assert cli.main(["train", str(config), "--name", "lat", "--runs-dir", runs, "--quiet", "--device", "cpu"]) == 0
    assert cli.main(["latency-table", "lat", "--runs-dir", runs, "--threads", "1", "--quiet", "--device", "cpu"]) == 0
    path = capsys.readouterr().out.strip()
    table = json.loads(open(path).read())
    assert path.endswith("latency/cpu-b1.json") and table["device"]["threads"] == 1 and table["entries"]
    generous = 1000.0
    assert cli.main(["search", "lat", "--runs-dir", runs, "--searcher", "random", "--max-latency-ms",
                     str(generous), "--trials", "3", "--json", "--quiet", "--device", "cpu"]) == 0
    result = json.loads(capsys.readouterr().out)
    check = result["latency_check"]
    assert abs(result["latency_ms"] - check["predicted_ms"]) < 1e-5 and check["measured_ms"] > 0
    assert set(check["device"]) >= {"device", "name", "torch", "threads", "dtype", "batch_size"}
