"""`nas latency-probe`: subnets chosen so that `latency-fit` tells the layer groups apart, their
ONNX files, the timings CSV round-tripped through `latency-fit`, resume and bad arguments."""
from __future__ import annotations

import csv
import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from nas import cli
from nas.core import yaml_io
from nas.core.arch import arch_id, read_arch_file
from nas.core.errors import ConfigError
from nas.engine.latency.fit import fit_table, space_groups
from nas.engine.latency.probe import RIDGE, d_optimal, design_matrix, probe_pool
from nas.engine.latency.table import LatencyTable
from nas.engine.latency.timings import Timings
from tests.conftest import make_space
from tests.support.tiny import tiny_config

ONNX_MISSING = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]


@pytest.fixture(scope="module")
def one_resolution():
    """A MobileNetV3 space at one resolution: 22 layer groups, rank 20 with the constant."""
    return make_space("mobilenetv3", small=True).restrict("resolution", [28])


@pytest.fixture(scope="module")
def design(one_resolution):
    groups, _ = space_groups(one_resolution)
    pool = probe_pool(one_resolution)
    return groups, pool, design_matrix(one_resolution, groups, pool)


def log_det(rows: np.ndarray) -> float:
    return float(np.linalg.slogdet(rows.T @ rows + RIDGE * np.eye(rows.shape[1]))[1])


def test_the_design_matrix_counts_each_groups_layers_and_ends_with_ones(one_resolution, design):
    groups, pool, x = design
    arch = pool[5]
    keys = [layer.key for layer in one_resolution.layers(arch)]
    assert list(x[5]) == [sum(keys.count(key) for key in group) for group in groups.groups] + [1.0]


def test_the_probe_reaches_the_pools_rank_and_beats_every_random_set_of_its_size(design):
    groups, pool, x = design
    count = groups.free + 1
    chosen = d_optimal(x, count)
    assert len(set(chosen)) == count
    rank = np.linalg.matrix_rank(x)
    assert rank == 20 < groups.free      # two keys always add up to the constant: no full column rank here
    assert np.linalg.matrix_rank(x[chosen]) == rank
    rng = np.random.default_rng(0)
    random_sets = [rng.choice(len(pool), count, replace=False) for _ in range(50)]
    assert log_det(x[chosen]) > max(log_det(x[s]) for s in random_sets)
    assert sum(np.linalg.matrix_rank(x[s]) < rank for s in random_sets) >= 25


def _fit_error(space, archs, planted, others) -> float:
    """Largest relative error of a fit on `archs` timed by the planted per-key costs, on `others`."""
    costs, constant = planted

    def ms(arch):
        return constant + sum(costs.get(layer.key, 0.0) for layer in space.layers(arch))   # fixed keys: constant

    timings = Timings(Path("planted.csv"), "latency_ms", list(archs), [ms(a) for a in archs], list(archs))
    try:
        table, _ = fit_table(space, timings)
    except ConfigError:       # a layer group never timed: nothing to predict its archs from
        return float("inf")
    truth = np.array([ms(a) for a in others])
    return float(np.max(np.abs(np.array([table.predict(space, a) for a in others]) - truth) / truth))


def test_a_fit_on_the_probe_recovers_planted_group_costs_where_random_sets_do_not(one_resolution, design):
    groups, pool, x = design
    rng = random.Random(3)      # one cost per group (layer keys counted alike cannot be told apart)
    planted = ({key: cost for group in groups.groups for cost in [rng.uniform(0.05, 1.0)] for key in group}, 0.7)
    count = groups.free + 1
    others = pool[::7]
    probe = [pool[i] for i in d_optimal(x, count)]
    assert _fit_error(one_resolution, probe, planted, others) < 1e-6
    draws = np.random.default_rng(1)
    errors = [_fit_error(one_resolution, [pool[i] for i in draws.choice(len(pool), count, replace=False)], planted,
                         others) for _ in range(10)]
    assert sum(error > 0.05 for error in errors) >= 5, errors


def test_the_probe_picks_distinct_rows_and_refuses_more_than_it_has():
    rows = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert sorted(d_optimal(rows, 2)) in ([0, 2], [1, 2])      # a duplicate adds nothing new
    with pytest.raises(ValueError):
        d_optimal(rows, 4)


# --- the command ---------------------------------------------------------------------------------

TINY_TWO_RESOLUTIONS = {"name": "mobilenetv3", "options": {
    "resolutions": [20, 28], "depths": [[1, 2]], "widths": [[8]], "kernel_sizes": [3, 5], "expand_ratios": [3],
    "strides": [2], "se": [False], "activations": ["relu"], "stem_width": 8, "head_width": 16,
    "num_features": 16}}      # at one resolution: 6 archs, 4 layer groups + a constant


@pytest.fixture(scope="module")
def tiny_yaml(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "tiny_probe.yaml"
    path.write_text(yaml_io.dumps({**tiny_config(), "space": TINY_TWO_RESOLUTIONS}))
    return path


def _probe(capsys, *args):
    code = cli.main(["latency-probe", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args, message", [
    (["2"], "N: must be an integer >= 3 (latency-fit needs at least that many timed archs), got 2"),
    (["7"], "N: 7 subnets asked, but the space has 6 distinct archs at resolution 28"),
    (["6", "--resolution", "24"], "--resolution: 24 is not a resolution of the space (choose from 20, 28)"),
    (["6", "--seed", "-1"], "--seed: must be an integer >= 0, got -1"),
])
def test_bad_arguments_are_one_line_and_exit_2(capsys, tiny_yaml, tmp_path, args, message):
    code, out, err = _probe(capsys, tiny_yaml, *args, "--out", tmp_path / "p")
    assert code == 2 and out == ""
    assert err.strip() == f"nas latency-probe: error: {message}"
    assert not (tmp_path / "p").exists()


def test_an_out_that_is_a_file_or_another_folder_is_refused(capsys, tiny_yaml, tmp_path):
    (tmp_path / "f").write_text("x")
    code, _, err = _probe(capsys, tiny_yaml, 6, "--out", tmp_path / "f")
    assert code == 2 and err.strip() == f"nas latency-probe: error: --out: {tmp_path / 'f'} is a file, not a folder"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("mine")
    code, _, err = _probe(capsys, tiny_yaml, 6, "--out", tmp_path / "d")
    assert code == 2 and err.strip() == (f"nas latency-probe: error: --out: {tmp_path / 'd'} holds files that are not "
                                         "a latency probe's (notes.txt); choose a new or empty folder")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["notes.txt"]


def test_a_space_without_resolutions_refuses_one(capsys, tmp_path):
    config = tmp_path / "cell.yaml"
    config.write_text(yaml_io.dumps(tiny_config(space="cell201")))
    code, _, err = _probe(capsys, config, 6, "--resolution", "12", "--out", tmp_path / "p")
    assert code == 2 and err.strip() == ("nas latency-probe: error: --resolution: space 'cell201' has no resolution "
                                         "choice; leave it out")


@pytest.mark.slow
@pytest.mark.skipif(bool(ONNX_MISSING), reason=f"ONNX files need {', '.join(ONNX_MISSING)} (the onnx extra)")
def test_the_probe_writes_onnx_subnets_whose_filled_csv_latency_fit_reads(capsys, tiny_yaml, tmp_path):
    import onnxruntime

    out = tmp_path / "probe"
    code, stdout, err = _probe(capsys, tiny_yaml, 6, "--resolution", 20, "--out", out, "--quiet", "--json")
    assert code == 0, err
    result = json.loads(stdout)       # nothing else on stdout (the ONNX exporter's progress lines included)
    assert result["resolution"] == 20 and result["free_costs"] == 5 and result["written"] == 6
    assert result["rank"] == result["pool_rank"] == 4
    assert "note: the subnets are at resolution 20 alone" in err
    rows = list(csv.DictReader((out / "timings.csv").open()))
    assert [row["arch"] for row in rows] == [f"{ident}.yaml" for ident in result["archs"]]
    assert all(row["latency_ms"] == "" for row in rows)

    # each ONNX file computes its arch's subnet, at the probe's resolution
    from nas.core.config import load_config
    from nas.engine.run import build_supernet
    supernet = build_supernet(load_config(str(tiny_yaml))).eval()
    x = torch.randn(3, 1, 20, 20)
    for row in rows:
        arch = read_arch_file(out / row["arch"])
        assert arch_id(arch) == row["model"][:-len(".onnx")] and arch["resolution"] == 20
        session = onnxruntime.InferenceSession(str(out / row["model"]), providers=["CPUExecutionProvider"])
        (logits,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        with torch.no_grad():
            expected = supernet.export(arch).eval()(x)
        assert np.abs(logits - expected.numpy()).max() <= 1e-4 * max(1.0, float(expected.abs().max()))

    # the milliseconds filled in, latency-fit reads the file as it stands
    planted = {"k3": 0.4, "k5": 0.9}
    fitting = {**tiny_config(), "space": {**TINY_TWO_RESOLUTIONS,
                                          "options": {**TINY_TWO_RESOLUTIONS["options"], "resolutions": [20]}}}
    space_yaml = tmp_path / "at20.yaml"
    space_yaml.write_text(yaml_io.dumps(fitting))
    filled = []
    for row in rows:
        arch = read_arch_file(out / row["arch"])
        depth = arch["stage0.depth"]
        kernels = [arch[f"stage0.block{j}.kernel_size"] for j in range(depth)]
        ms = 1.0 + sum(planted[f"k{k}"] * (j + 1) for j, k in enumerate(kernels))    # per block and kernel
        filled.append({**row, "latency_ms": f"{ms:.6f}"})
    with (out / "timings.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(filled)
    assert cli.main(["latency-fit", str(space_yaml), str(out / "timings.csv"), "--name", "phone",
                     "--out", str(tmp_path / "phone.json")]) == 0
    capsys.readouterr()
    table = LatencyTable.load(tmp_path / "phone.json")
    assert table.fitted["archs"] == 6
    for row in filled:
        arch = read_arch_file(out / row["arch"])
        assert table.predict(space_yaml_space(space_yaml), arch) == pytest.approx(float(row["latency_ms"]), rel=1e-6)

    # a rerun resumes: a lost ONNX file is written again, the filled timings are kept
    lost = out / rows[2]["model"]
    lost.unlink()
    before = (out / "timings.csv").read_text()
    code, stdout, _ = _probe(capsys, tiny_yaml, 6, "--resolution", 20, "--out", out, "--quiet", "--json")
    assert code == 0 and json.loads(stdout)["written"] == 1 and lost.is_file()
    assert (out / "timings.csv").read_text() == before
    # other settings into the same folder would mix two probes: refused, nothing touched
    code, _, err = _probe(capsys, tiny_yaml, 5, "--resolution", 20, "--out", out, "--quiet")
    assert code == 2 and err.strip().startswith(f"nas latency-probe: error: --out: {out} holds a probe of other "
                                                "settings")
    assert (out / "timings.csv").read_text() == before


def space_yaml_space(path):
    from nas.core.config import load_config
    from nas.engine.run import build_space
    return build_space(load_config(str(path)))


@pytest.mark.slow
@pytest.mark.skipif(bool(ONNX_MISSING) or importlib.util.find_spec("ofa") is None,
                    reason="needs the ofa package and the onnx extra (pip install -e .[dev,onnx])")
def test_an_imported_supernet_at_one_resolution_is_probed_as_the_published_supernet_page_says(capsys, tmp_path):
    from nas.engine.latency.timings import read_timings
    from nas.engine.run import load_run
    from tests.support.ofa_nets import random_ofa_net

    torch.save({"state_dict": random_ofa_net().state_dict()}, tmp_path / "ofa_w10")
    runs = tmp_path / "runs"
    assert cli.main(["import", "ofa", str(tmp_path / "ofa_w10"), "--name", "phone", "--runs-dir", str(runs),
                     "--set", "space.options.resolutions=[128]"]) == 0
    capsys.readouterr()
    code, out, err = _probe(capsys, "phone", 3, "--out", tmp_path / "probe", "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["resolution"] == 128 and result["free_costs"] == 91 and "note:" in err   # 3 < 92: priors
    space = load_run("phone", runs, device="cpu").space
    (tmp_path / "probe" / "timings.csv").write_text("".join(
        line if n == 0 else line.rstrip("\n") + "12.5\n"
        for n, line in enumerate((tmp_path / "probe" / "timings.csv").read_text().splitlines(keepends=True))))
    timings = read_timings(tmp_path / "probe" / "timings.csv", space)      # the run's own space reads every row
    assert [arch_id(a) for a in timings.archs] == result["archs"] and timings.ms == [12.5] * 3
