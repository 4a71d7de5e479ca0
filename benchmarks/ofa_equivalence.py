"""OFA equivalence, the full sweep: an imported Once-for-All checkpoint against OFA's own code.

For each width (w1.0, w1.2): a random `OFAMobileNetV3` (as tests/support/ofa_nets.py makes it:
random weights, kernel-transformation matrices away from the identity, BN statistics averaged
over random images through the max net), saved as OFA's model zoo saves it and read by
`nas import ofa`; then the max, the min and random subnets cycling through every one of OFA's 25
resolutions (128-224 px). Per subnet: the largest |difference| of the exported static module's
logits from OFA's dynamic net and from its `get_active_subnet()`, relative to the largest
|logit|, plain and minus the batch mean, in float64 (both supernets converted, so kernels are
transformed in float64 too: the implementations) and in float32 (what a user runs; a random
network amplifies fp32 rounding, most on subnets its statistics do not fit, so each engine's own
float32 rounding, against OFA in float64, is reported beside it);
MACs against `Mbv3FLOPsModel` (round(MMACs x 1e6)) and params against OFA's active subnet.

    python -m benchmarks.ofa_equivalence [--subnets 200] [--batch 2] [--widths 1.0 1.2] [--threads 1]

Needs the `ofa` package (the dev extra). Prints one JSON line: per width, the worst differences and
the number of MACs and params mismatches (and, on stderr, the running figures after each subnet).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import common
from nas import api
from nas.engine.importing import import_run
from nas.engine.importing.ofa import ofa_subnet
from tests.support.ofa_nets import float64_layers, random_ofa_net


def relative_differences(ours: torch.Tensor, theirs: torch.Tensor) -> tuple[float, float]:
    """max |ours - theirs| / max |theirs|, plain and with each logit's batch mean removed."""
    plain = ((ours - theirs).abs().max() / theirs.abs().max()).item()
    a, b = ours - ours.mean(0), theirs - theirs.mean(0)
    return plain, ((a - b).abs().max() / b.abs().max()).item()


def sweep(width: float, subnets: int, batch: int, seed: int) -> dict:
    from ofa.nas.efficiency_predictor import Mbv3FLOPsModel

    with tempfile.TemporaryDirectory() as tmp:
        net = random_ofa_net(width, seed=seed)
        path = Path(tmp) / f"ofa_mbv3_d234_e346_k357_w{width}"
        torch.save({"state_dict": net.state_dict()}, path)
        start = time.perf_counter()
        import_run("ofa", path, "ofa", runs_dir=Path(tmp) / "runs")
        import_seconds = time.perf_counter() - start
        run = api.load_run(Path(tmp) / "runs" / "ofa", device="cpu")
    space, rng = run.space, random.Random(seed)
    resolutions = space.choices()["resolution"]
    archs = [space.max(), space.min()]
    while len(archs) < subnets:
        archs.append({**space.sample(rng), "resolution": resolutions[len(archs) % len(resolutions)]})
    nets = {torch.float32: net, torch.float64: copy.deepcopy(net).double()}
    supernets = {torch.float32: run.subnet(space.max()), torch.float64: copy.deepcopy(run.subnet(space.max())).double()}
    worst = {f"{dtype}_{against}_{kind}": 0.0 for dtype in ("fp32", "fp64") for against in ("dynamic", "subnet")
             for kind in ("plain", "centred")}
    worst.update({"fp32_rounding_nas_centred": 0.0, "fp32_rounding_ofa_centred": 0.0})
    macs_mismatch, params_mismatch = [], []
    for done, arch in enumerate(archs, 1):
        args = ofa_subnet(space, arch)
        ofa_macs = round(Mbv3FLOPsModel(net).get_efficiency(dict(args)) * 1e6)
        subnet_args = {k: v for k, v in args.items() if k != "image_size"}
        x = torch.randn(batch, 3, arch["resolution"], arch["resolution"], generator=torch.Generator().manual_seed(1))
        outputs = {}
        for dtype, name in ((torch.float32, "fp32"), (torch.float64, "fp64")):
            theirs_net = nets[dtype]
            theirs_net.set_active_subnet(**subnet_args)
            with float64_layers() if dtype == torch.float64 else contextlib.nullcontext():
                subnet = theirs_net.get_active_subnet(preserve_weight=True).eval()
                static = supernets[dtype].export(arch)
            with torch.no_grad():
                ours = static(x.to(dtype))
                dynamic, active = theirs_net(x.to(dtype)), subnet(x.to(dtype))
            outputs[name] = (ours, dynamic)
            for against, theirs in (("dynamic", dynamic), ("subnet", active)):
                for kind, value in zip(("plain", "centred"), relative_differences(ours, theirs)):
                    key = f"{name}_{against}_{kind}"
                    worst[key] = max(worst[key], value)
            if dtype == torch.float32 and space.params(arch) != sum(p.numel() for p in subnet.parameters()):
                params_mismatch.append(arch)
        if space.macs(arch) != ofa_macs:
            macs_mismatch.append(arch)
        reference = outputs["fp64"][1]      # each engine's own float32 rounding: against OFA in float64
        for engine, logits in (("nas", outputs["fp32"][0]), ("ofa", outputs["fp32"][1])):
            key = f"fp32_rounding_{engine}_centred"
            worst[key] = max(worst[key], relative_differences(logits.double(), reference)[1])
        print(f"w{width} {done}/{len(archs)} at {arch['resolution']} px: worst fp64 centred "
              f"{max(worst['fp64_dynamic_centred'], worst['fp64_subnet_centred']):.3g}, fp32 centred "
              f"{max(worst['fp32_dynamic_centred'], worst['fp32_subnet_centred']):.3g}, MACs mismatches "
              f"{len(macs_mismatch)}, params mismatches {len(params_mismatch)}", file=sys.stderr, flush=True)
    return {"width": width, "subnets": len(archs), "resolutions": len({a["resolution"] for a in archs}),
            "batch": batch, "import_seconds": round(import_seconds, 2),
            "worst_relative_difference": {k: float(f"{v:.3g}") for k, v in worst.items()},
            "macs_mismatches": len(macs_mismatch), "params_mismatches": len(params_mismatch)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subnets", type=int, default=200, help="subnets per width, max and min included")
    parser.add_argument("--batch", type=int, default=2, help="images per subnet")
    parser.add_argument("--widths", type=float, nargs="+", default=[1.0, 1.2])
    parser.add_argument("--seed", type=int, default=0)
    common.threads_argument(parser, 1)
    args = parser.parse_args(argv)
    threads = common.use_threads(args.threads)
    start = time.perf_counter()
    results = [sweep(width, args.subnets, args.batch, args.seed) for width in args.widths]
    return common.emit("ofa_equivalence", {"threads": threads, "widths": results,
                                           "seconds": round(time.perf_counter() - start)}, argv)


if __name__ == "__main__":
    common.run(main)
