"""nas's `imagenet_alphanet` space beside AttentiveNAS's own code: logits and MACs, subnet by subnet.

    OMP_NUM_THREADS=1 python benchmarks/alphanet_equivalence.py --attentivenas DIR --alphanet DIR \
        [--random 20] [--seed 0] [--batch 4] [--json OUT]

DIR are checkouts of github.com/facebookresearch/AttentiveNAS (its models/ is imported from
there; nothing of it is vendored) and github.com/facebookresearch/AlphaNet (its
configs/train_alphanet_models.yml gives the supernet_config, configs/eval_alphanet_models.yml
the A0-A6 models). Their dynamic supernet gets random weights and BN statistics from random
images (one training-mode pass of the max subnet); it is
saved as their trainer saves it (DDP's `module.` prefix, `bn_tracking` copies, pickled `args`
in the legacy format) and read by `nas import alphanet`'s loader into nas's supernet. Then, for
A0-A6 and `--random` subnets drawn from nas's space, at their resolutions:
their static model (`get_active_subnet()`) against nas's static export and nas's supernet
(max |difference| / max |logit|, target <= 1e-5; the export also on logits less their batch
mean, in float32 and in float64, reported), the same on inputs 32 px larger that both resize bicubically, and their `compute_active_subnet_flops()` against nas's MACs.
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import yaml

from nas.core.config import load_config
from nas.engine.importing.alphanet import load_alphanet
from search_spaces.attentive_mbv3 import AttentiveMbv3Space

TOLERANCE = 1e-5
STAGES = 7


def namespace(value: Any) -> Any:
    """YAML mappings as attribute objects, as their `AttrDict` reads them."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: namespace(v) for k, v in value.items()})
    return [namespace(v) for v in value] if isinstance(value, list) else value


def their_subnet(arch: dict) -> dict:
    """A nas arch as their `set_active_subnet` keywords."""
    return {"resolution": arch["resolution"],
            "width": [arch["stem_width"]] + [arch[f"stage{i}.width"] for i in range(STAGES)] + [arch["head_width"]],
            "depth": [arch[f"stage{i}.depth"] for i in range(STAGES)],
            "kernel_size": [arch[f"stage{i}.kernel_size"] for i in range(STAGES)],
            "expand_ratio": [arch[f"stage{i}.expand_ratio"] for i in range(STAGES)]}


def nas_arch(model: dict) -> dict:
    """One of their eval config's models as a nas arch."""
    width, arch = model["width"], {"resolution": model["resolution"]}
    arch.update({"stem_width": width[0], "head_width": width[-1]})
    for i in range(STAGES):
        arch.update({f"stage{i}.width": width[i + 1], f"stage{i}.depth": model["depth"][i],
                     f"stage{i}.kernel_size": model["kernel_size"][i],
                     f"stage{i}.expand_ratio": model["expand_ratio"][i]})
    return arch


@torch.no_grad()
def randomize(model: torch.nn.Module, seed: int) -> None:
    """Random weights (not their init: BN scales away from 0) and random BN statistics."""
    generator = torch.Generator().manual_seed(seed)
    for name, tensor in model.state_dict().items():
        if not tensor.is_floating_point():
            continue
        if name.endswith("running_var"):
            tensor.copy_(torch.rand(tensor.shape, generator=generator) + 0.5)
        elif name.endswith("running_mean") or name.endswith("bias"):
            tensor.copy_(torch.randn(tensor.shape, generator=generator) * 0.1)
        elif name.endswith("bn.weight"):
            tensor.copy_(torch.rand(tensor.shape, generator=generator) * 0.5 + 0.5)
        else:
            fan_in = tensor[0].numel() if tensor.dim() > 1 else tensor.numel()
            tensor.copy_(torch.randn(tensor.shape, generator=generator) * (1.0 / fan_in) ** 0.5)


@torch.no_grad()
def statistics_from_images(model: torch.nn.Module, resolution: int, seed: int) -> None:
    """Every BN's running statistics from one training-mode pass of the max subnet over random
    images (their BN layers slice a prefix, so every subnet reads them): activations then stay
    normalised through the depth and the logits depend on the image."""
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = 1.0
    model.sample_max_subnet()
    model.train()
    model(torch.randn(16, 3, resolution, resolution, generator=torch.Generator().manual_seed(seed)))
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = 0.1


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|."""
    return (a - b).abs().max().item() / b.abs().max().item()


def centred(logits: torch.Tensor) -> torch.Tensor:
    """Logits less their batch mean: what depends on the image (random weights give logits that
    barely do, so a plain comparison could hide a wrong layer)."""
    return logits - logits.mean(0, keepdim=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attentivenas", type=Path, required=True)
    parser.add_argument("--alphanet", type=Path, required=True)
    parser.add_argument("--random", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(args.attentivenas.resolve()))
    from models.attentive_nas_dynamic_model import AttentiveNasDynamicModel

    train_cfg = yaml.safe_load((args.alphanet / "configs/train_alphanet_models.yml").read_text())
    eval_cfg = yaml.safe_load((args.alphanet / "configs/eval_alphanet_models.yml").read_text())
    theirs = AttentiveNasDynamicModel(namespace(train_cfg["supernet_config"]), n_classes=1000, bn_param=(0.1, 1e-5))
    randomize(theirs, args.seed)
    statistics_from_images(theirs, min(train_cfg["supernet_config"]["resolutions"]), args.seed)
    space = AttentiveMbv3Space(load_config("imagenet_alphanet").space.options, 3, 1000)
    ours = space.build_supernet().eval()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "alphanet_pretrained.pth.tar"
        state = {f"module.{k}": v for k, v in theirs.state_dict().items()}
        torch.save({"epoch": 360, "args": train_cfg, "state_dict": state}, path, _use_new_zipfile_serialization=False)
        record = load_alphanet(path, ours)
    models = {name: nas_arch(cfg) for name, cfg in eval_cfg["pareto_models"].items() if isinstance(cfg, dict)}
    rng = random.Random(args.seed)
    models.update({f"random{k}": space.sample(rng) for k in range(args.random)})
    rows, generator = [], torch.Generator().manual_seed(args.seed)
    for name, arch in models.items():
        started = time.perf_counter()
        arch = space.canonical(arch)
        theirs.set_active_subnet(**their_subnet(arch))
        their_macs = theirs.compute_active_subnet_flops()
        their_static = theirs.get_active_subnet().eval()
        our_static = ours.export(arch)
        ours.set_active(arch)
        size = arch["resolution"]
        x = torch.randn(args.batch, 3, size, size, generator=generator)
        larger = torch.randn(args.batch, 3, size + 32, size + 32, generator=generator)
        with torch.no_grad():
            reference, reference_resized = their_static(x), their_static(larger)
            exported = our_static(x)
            in_float64 = relative(centred(our_static.double()(x.double())), centred(their_static.double()(x.double())))
            row = {"model": name, "resolution": size, "their_mmacs": round(their_macs, 6),
                   "nas_mmacs": space.macs(arch) / 1e6, "export": relative(exported, reference),
                   "export_centred": relative(centred(exported), centred(reference)),
                   "export_centred_float64": in_float64,
                   "supernet": relative(ours(x), reference),
                   "supernet_resized": relative(ours(larger), reference_resized),
                   "max_logit": reference.abs().max().item(), "seconds": round(time.perf_counter() - started, 1)}
        row["passed"] = (max(row["export"], row["supernet"], row["supernet_resized"]) <= TOLERANCE
                         and abs(row["their_mmacs"] - row["nas_mmacs"]) < 1e-6)
        rows.append(row)
        print(f"{name:9s} {size} px  {row['nas_mmacs']:9.3f} MMACs (theirs {row['their_mmacs']:9.3f})  "
              f"export {row['export']:.2e} (centred {row['export_centred']:.2e}, "
              f"float64 {row['export_centred_float64']:.1e})  supernet {row['supernet']:.2e}  resized {row['supernet_resized']:.2e}"
              f"  {'ok' if row['passed'] else 'FAILED'}", flush=True)
    commit = subprocess.run(["git", "-C", str(args.attentivenas), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    summary = {"attentivenas_commit": commit, "import": record, "rows": rows, "tolerance": TOLERANCE,
               "passed": sum(r["passed"] for r in rows), "total": len(rows),
               "worst": max(max(r["export"], r["supernet"], r["supernet_resized"]) for r in rows),
               "worst_centred": max(r["export_centred"] for r in rows),
               "worst_centred_float64": max(r["export_centred_float64"] for r in rows)}
    print(f"{summary['passed']}/{summary['total']} within {TOLERANCE:g} x max |logit| (worst {summary['worst']:.2e}; "
          f"centred logits: worst {summary['worst_centred']:.2e}, in float64 {summary['worst_centred_float64']:.1e}); "
          f"AttentiveNAS {commit}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0 if summary["passed"] == summary["total"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
