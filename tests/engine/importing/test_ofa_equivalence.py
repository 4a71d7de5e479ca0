"""An imported OFA checkpoint computes what OFA's own code computes (the `ofa` package, dev extra).

Random weights, BN statistics from random images and transformation matrices away from the
identity; for the max, the min and 30 random subnets at small resolutions, the exported static
module's logits (and logits minus their batch mean: random-init logits barely depend on the
input) agree with OFA's dynamic net and its `get_active_subnet()` to 1e-5 of the largest; MACs
equal OFA's `Mbv3FLOPsModel` and params OFA's active subnet's. Those comparisons run both
networks in float64 (kernel transformations included): a random network's fp32 rounding
alone moves its centred logits by more than 1e-5 on subnets its BN statistics were not
gathered on, which says nothing of the implementations. `model.pt2` and ONNX (fp32 files) are checked in fp32 for the max and the min,
each on a network whose statistics were gathered on that subnet. The full sweep is
`python -m benchmarks.ofa_equivalence`.
"""
from __future__ import annotations

import contextlib
import copy
import random

import pytest
import torch

from nas import api
from nas.cli import main
from nas.engine.export import save_export
from nas.engine.importing.ofa import ofa_subnet
from tests.support.ofa_nets import float64_layers, random_ofa_net

pytest.importorskip("ofa", reason="the ofa package (pip install -e .[dev]) runs OFA's own code")

RESOLUTIONS = [32, 40, 48]
TOLERANCE = 1e-5


def close(ours: torch.Tensor, theirs: torch.Tensor) -> bool:
    """Within 1e-5 of the largest |logit|, and so are the logits minus their batch mean."""
    centred = (ours - ours.mean(0), theirs - theirs.mean(0))
    return all((a - b).abs().max().item() <= TOLERANCE * b.abs().max().item() for a, b in [(ours, theirs), centred])


def import_random(tmp, statistics_of: str = "max"):
    """(OFA's net, the imported run) for a random w1.0 OFA supernet saved as its model zoo saves."""
    net = random_ofa_net(1.0, statistics_of=statistics_of)
    torch.save({"state_dict": net.state_dict()}, tmp / "ofa_mbv3_d234_e346_k357_w1.0")
    assert main(["import", "ofa", str(tmp / "ofa_mbv3_d234_e346_k357_w1.0"), "--name", "ofa", "--runs-dir",
                 str(tmp / "runs"), "--set", f"space.options.resolutions={RESOLUTIONS}"]) == 0
    return net, api.load_run(tmp / "runs" / "ofa", device="cpu")


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    return import_random(tmp_path_factory.mktemp("ofa"))


def _theirs(net, arch_args: dict, x: torch.Tensor):
    from ofa.nas.efficiency_predictor import Mbv3FLOPsModel

    macs = round(Mbv3FLOPsModel(net).get_efficiency(arch_args) * 1e6)   # sets the subnet active
    with float64_layers() if x.dtype == torch.float64 else contextlib.nullcontext():
        subnet = net.get_active_subnet(preserve_weight=True).eval()
    with torch.no_grad():
        return net(x), subnet(x), subnet, macs


@pytest.mark.slow
def test_imported_subnets_match_ofas_dynamic_net_and_its_active_subnets(imported):
    net, run = imported
    net = copy.deepcopy(net).double()
    ours = copy.deepcopy(run.subnet(run.space.max())).double()     # kernels transformed in float64 too
    space, rng = run.space, random.Random(0)
    archs = [space.max(), space.min()] + [space.sample(rng) for _ in range(30)]
    assert {a["resolution"] for a in archs} == set(RESOLUTIONS)
    for arch in archs:
        x = torch.randn(4, 3, arch["resolution"], arch["resolution"], generator=torch.Generator().manual_seed(1),
                        dtype=torch.float64)
        dynamic, static_theirs, subnet, macs = _theirs(net, ofa_subnet(space, arch), x)
        with torch.no_grad():
            with float64_layers():
                logits = ours.export(arch)(x)
        assert close(logits, dynamic) and close(logits, static_theirs), arch
        assert space.macs(arch) == macs, arch
        assert space.params(arch) == sum(p.numel() for p in subnet.parameters()), arch


@pytest.mark.slow
@pytest.mark.parametrize("corner", ["max", "min"])
def test_imported_pt2_and_onnx_match_ofa(corner, tmp_path, request):
    onnxruntime = pytest.importorskip("onnxruntime", reason="the onnx extra checks the ONNX file")
    if corner == "max":      # the module's network (statistics of the max): imported once for both tests
        net, run = request.getfixturevalue("imported")
    else:
        net, run = import_random(tmp_path, statistics_of=corner)
    arch = getattr(run.space, corner)()
    # save_export's own supernet-vs-export check is absolute (1e-5): this random net's logits reach ~10
    save_export(run.subnet(arch), arch, tmp_path / corner, export_format="onnx", tolerance=1e-4)
    x = torch.randn(2, 3, arch["resolution"], arch["resolution"], generator=torch.Generator().manual_seed(2))
    dynamic, _, _, _ = _theirs(net, ofa_subnet(run.space, arch), x)
    program = torch.export.load(str(tmp_path / corner / "model.pt2")).module()
    with torch.no_grad():
        assert close(program(x), dynamic)
    session = onnxruntime.InferenceSession(str(tmp_path / corner / "model.onnx"))
    logits = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    assert close(torch.from_numpy(logits), dynamic)
