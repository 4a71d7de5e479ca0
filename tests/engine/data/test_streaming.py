"""The streaming data path (DataLoader, lazily decoded ImageFolder PNGs, timm transforms, mixup):
same batches as in memory, determinism under workers/ranks/resume, bounded laziness, clear errors."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from nas import api, cli
from nas.core import yaml_io
from nas.core.config import load_config
from nas.core.errors import DataError
from nas.engine.checkpoint import load_checkpoint
from nas.engine.data import datasets
from nas.engine.data.build import build_source
from nas.engine.data.sources import InMemorySource
from nas.engine.data.streaming import StreamingSource
from tests.support.fake_data import write_png_tree
from tests.support.helpers import ROOT, straight_and_resumed, torchrun
from tests.support.stream_ddp_job import digest
from tests.support.tiny import tiny_config

RANDOM_AUGMENT = {"crop_padding": 0, "hflip": True, "random_resized_crop": True, "auto_augment": "rand-m9-mstd0.5",
                  "re_prob": 0.5}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    return root, write_png_tree(root)


def tree_config(root, steps: int = 8, workers: int = 0, augment: dict | None = None, **data) -> dict:
    """The tiny run on a 3-class PNG tree: 30 training images, 6 validation, batch 8 (3 steps an
    epoch); no augmentation unless `augment` turns some on."""
    config = tiny_config(steps=steps)
    config["data"] = {"name": "imagefolder", "root": str(root), "image_size": 16, "val_size": 6,
                      "workers": workers, "augment": {"crop_padding": 0, "hflip": False, **(augment or {})}, **data}
    config["train"]["batch_size"] = 8
    config["eval"] = {"bn_recal_batches": 2, "bn_recal_batch_size": 8, "batch_size": 16}
    return config


def source(root, **kwargs):
    return build_source(load_config(tree_config(root, **kwargs)).data)


def assert_same_batches(a, b):
    a, b = list(a), list(b)
    assert len(a) == len(b) > 0
    for (xa, ya), (xb, yb) in zip(a, b):
        assert xa.dtype == xb.dtype == torch.float32
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


# ----------------------------------------------------------- same batches as in memory
@pytest.mark.parametrize("workers", [0, 2])
def test_imagefolder_streams_the_in_memory_batches(tree, workers):
    root, _ = tree
    augment = {"crop_padding": 2, "hflip": True}          # whole-batch augmentation: seeded the same
    streamed = source(root, workers=workers, augment=augment)
    in_memory = source(root, in_memory=True, augment=augment)
    assert isinstance(streamed, StreamingSource) and isinstance(in_memory, InMemorySource)
    for epoch in (0, 1):
        assert_same_batches(streamed.train_batches(8, 3, epoch), in_memory.train_batches(8, 3, epoch))
    assert_same_batches(streamed.train_batches(8, 3, 1, 1, rank=1, world_size=2),
                        in_memory.train_batches(8, 3, 1, 1, rank=1, world_size=2))
    assert_same_batches(streamed.calibration_batches(3, 8, 5), in_memory.calibration_batches(3, 8, 5))
    for split in ("val", "test"):
        assert_same_batches(streamed.eval_batches(split, 4), in_memory.eval_batches(split, 4))


def test_fashion_mnist_streams_the_in_memory_batches():
    config = load_config(tiny_config(), ["data.train_size=256", "data.val_size=64",
                                         "data.augment.crop_padding=2", "data.augment.hflip=true"])
    in_memory = build_source(config.data)
    streamed = build_source(dataclasses.replace(config.data, in_memory=False, workers=2))
    assert not in_memory.streams and streamed.streams
    assert_same_batches(streamed.train_batches(64, 0, 2, 1), in_memory.train_batches(64, 0, 2, 1))
    assert_same_batches(streamed.eval_batches("val", 50), in_memory.eval_batches("val", 50))


def test_more_workers_than_cpus_are_capped_at_the_cpus(monkeypatch, recwarn):
    """`data.workers: 4` (the default) on a 2-CPU machine starts 2 workers, and torch does not warn."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    config = load_config(tiny_config(), ["data.train_size=128", "data.val_size=64"])
    streamed = build_source(dataclasses.replace(config.data, in_memory=False, workers=4))
    assert streamed.workers == 2
    assert_same_batches(streamed.train_batches(64, 0, 1, 1), build_source(config.data).train_batches(64, 0, 1, 1))
    assert not [w for w in recwarn if "worker" in str(w.message)]
    assert build_source(dataclasses.replace(config.data, in_memory=False, workers=1)).workers == 1


def test_auto_streams_imagefolder_and_per_image_transforms_only(tree):
    root, _ = tree
    assert source(root).streams
    fashion = load_config(tiny_config()).data
    assert not fashion.streams
    assert dataclasses.replace(fashion, augment=dataclasses.replace(fashion.augment, re_prob=0.1)).streams


# ---------------------------------------------------------------- laziness and errors
def test_imagefolder_decodes_only_what_a_batch_needs(tree, monkeypatch):
    from PIL import Image

    root, written = tree
    mean, std = torch.tensor(datasets.IMAGENET_MEAN).view(3, 1, 1), torch.tensor(datasets.IMAGENET_STD).view(3, 1, 1)
    opened = []
    load_rgb = datasets.load_rgb

    def counting(path):
        opened.append(path)
        return load_rgb(path)

    monkeypatch.setattr("nas.engine.data.images.load_rgb", counting)
    streamed = source(root)
    assert opened == []                                   # listing decodes nothing
    images, labels = next(iter(streamed.train_batches(8, 0, 0)))
    assert len(opened) == 8 and len(set(opened)) == 8
    # each decoded image is its file resized (shorter side) and centre-cropped, then normalised
    for path, image, label in zip(opened, images, labels):
        relative = os.path.relpath(path, root)
        expected = datasets.decode_transform(16)(Image.fromarray(written[relative]))
        assert torch.allclose(image, (expected / 255 - mean) / std, atol=1e-6)
        assert ("ant", "bee", "cow")[int(label)] == relative.split("/")[1]


@pytest.mark.parametrize("in_memory, workers", [(False, 1), (True, 0)])
def test_corrupt_image_is_one_line_error_naming_it(tmp_path, capsys, in_memory, workers):
    write_png_tree(tmp_path / "tree", corrupt="train/bee/3.png")
    path = tmp_path / "run.yaml"
    path.write_text(yaml_io.dumps(tree_config(tmp_path / "tree", steps=6, workers=workers, in_memory=in_memory)))
    code = cli.main(["train", str(path), "--runs-dir", str(tmp_path / "runs"), "--quiet", "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "train/bee/3.png: cannot decode image" in err, err


# ------------------------------------------------------ per-image transforms, determinism
def test_per_image_transforms_do_not_depend_on_workers_ranks_or_start(tree):
    root, _ = tree
    single = source(root, workers=0, augment=RANDOM_AUGMENT)
    parallel = source(root, workers=2, augment=RANDOM_AUGMENT)
    full = list(single.train_batches(8, 4, 1))
    assert_same_batches(full, parallel.train_batches(8, 4, 1))
    assert_same_batches(full[1:], parallel.train_batches(8, 4, 1, start_step=1))
    shards = [list(parallel.train_batches(8, 4, 1, rank=r, world_size=2)) for r in (0, 1)]
    for step, (x, y) in enumerate(full):
        assert torch.equal(torch.cat([shards[0][step][0], shards[1][step][0]]), x)
        assert torch.equal(torch.cat([shards[0][step][1], shards[1][step][1]]), y)
    plain = list(source(root).train_batches(8, 4, 1))
    assert all(torch.equal(a[1], b[1]) for a, b in zip(full, plain))     # same order of images ...
    assert not any(torch.equal(a[0], b[0]) for a, b in zip(full, plain))  # ... transformed
    assert not torch.equal(full[0][0], next(iter(single.train_batches(8, 4, 2)))[0])
    torch.manual_seed(0)
    state = torch.get_rng_state()
    list(single.train_batches(8, 4, 1))
    assert torch.equal(torch.get_rng_state(), state)                     # the global RNG is untouched


def test_mixup_mixes_pairs_with_one_coefficient_and_soft_targets(tree):
    root, _ = tree
    plain = list(source(root).train_batches(8, 1, 0))
    mixed = list(source(root, augment={"crop_padding": 0, "mixup_alpha": 0.8}).train_batches(8, 1, 0))
    for (x, y), (xm, target) in zip(plain, mixed):
        assert target.shape == (8, 3) and torch.allclose(target.sum(1), torch.ones(8))
        i = next(i for i in range(8) if y[i] != y[7 - i])
        lam = float(target[i, y[i]])
        expected_target = lam * torch.eye(3)[y] + (1 - lam) * torch.eye(3)[y.flip(0)]
        assert torch.allclose(target, expected_target, atol=1e-6)
        assert torch.allclose(xm, lam * x + (1 - lam) * x.flip(0), atol=1e-5)
    again = list(source(root, augment={"crop_padding": 0, "mixup_alpha": 0.8}).train_batches(8, 1, 0))
    assert_same_batches(mixed, again)
    odd = source(root, augment={"crop_padding": 0, "cutmix_alpha": 1.0})
    with pytest.raises(DataError, match="train.batch_size: .* even per rank, got 5"):
        list(odd.train_batches(10, 1, 0, rank=0, world_size=2))


@pytest.mark.slow
def test_streamed_run_resumes_mid_epoch_to_identical_weights(tmp_path, tree, monkeypatch):
    root, _ = tree
    augment = {**RANDOM_AUGMENT, "mixup_alpha": 0.8, "cutmix_alpha": 1.0}
    config = load_config(tree_config(root, steps=8, workers=2, augment=augment))

    def train(name, resume):
        return api.train(config, name=name, resume=resume, runs_dir=tmp_path, progress=False, device="cpu")

    a, b = straight_and_resumed(train, 4, monkeypatch)       # epoch 1 runs steps 3..5: mid-epoch
    assert a["step"] == b["step"] == 8
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    initial = api.build_supernet(config).state_dict()
    assert any(not torch.equal(initial[k], v) for k, v in a["model"].items())
    epochs = (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    assert len(epochs) == 3                      # epoch ends at steps 3 and 6, and the last step


def test_streamed_run_evaluates_what_in_memory_evaluates(tmp_path, tree):
    root, _ = tree
    results = {}
    for in_memory in (True, False):
        config = load_config(tree_config(root, steps=3, in_memory=in_memory))
        name = f"m{int(in_memory)}"
        api.train(config, name=name, runs_dir=tmp_path, progress=False, device="cpu")
        run = api.load_run(name, tmp_path, device="cpu")
        assert run.data.streams is not in_memory
        results[in_memory] = [api.evaluate(run, arch, "test").top1 for arch in ("min", "max")]
        weights = load_checkpoint(run.checkpoint)["model"]
        results[f"w{in_memory}"] = torch.cat([v.flatten().float() for v in weights.values()])
    assert results[True] == results[False]
    assert torch.equal(results["wTrue"], results["wFalse"])


def test_files_are_kept_in_one_byte_array(tree):
    root, _ = tree
    images = source(root).images["train"]
    assert isinstance(images.paths, np.ndarray) and images.paths.dtype.kind == "S" and len(images) == 30


@pytest.mark.slow
def test_two_gloo_ranks_stream_disjoint_shards_of_each_global_batch(tmp_path, tree):
    import json

    root, _ = tree
    config = tmp_path / "ddp.yaml"
    config.write_text(yaml_io.dumps(tree_config(root, steps=6, workers=1)))
    torchrun("stream_ddp_job.py", str(tmp_path), str(config), cwd=tmp_path)
    rows = [json.loads((tmp_path / f"rows-{rank}.json").read_text()) for rank in (0, 1)]
    assert len(rows[0]) == len(rows[1]) == 6 and all(len(step) == 4 for r in rows for step in r)

    one_process = build_source(load_config(str(config)).data)
    expected = [[digest(row) for row in images] for epoch in (0, 1)
                for images, _ in one_process.train_batches(8, 0, epoch)]
    for step in range(6):
        assert rows[0][step] + rows[1][step] == expected[step]      # each rank its rows of the global batch
    for epoch in (0, 1):
        shards = [{d for step in r[3 * epoch: 3 * epoch + 3] for d in step} for r in rows]
        assert len(shards[0]) == len(shards[1]) == 12 and not shards[0] & shards[1]   # disjoint shards


_CTRL_C_DURING_EVALUATION = """
import os, signal
from nas.core.config import load_config
from nas.engine.data.build import build_source
from tests.support.tiny import tiny_config

config = tiny_config()
config["data"].update(in_memory=False, workers=1)
batches = build_source(load_config(config).data).eval_batches("val", 32)
next(batches)                  # the worker runs, with its own handlers (forked before; spawned workers too)
signal.signal(signal.SIGINT, lambda signum, frame: None)   # as in training: stop after the work in progress
os.killpg(0, signal.SIGINT)                                # Ctrl-C: the whole process group
print(1 + sum(1 for _ in batches))
"""


@pytest.mark.slow
def test_ctrl_c_reaches_the_workers_but_the_batches_in_progress_still_arrive():
    """A training stopped by Ctrl-C finishes its step or evaluation before its checkpoint: the
    workers (in the same process group) must not quit under it."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", _CTRL_C_DURING_EVALUATION], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=600, start_new_session=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["16"]                      # 512 validation images in batches of 32


_ONE_BATCH_THEN_EXIT = """
import multiprocessing.util    # before torch: multiprocessing's exit hook then runs after torch's
import sys

from nas.core import yaml_io
from nas.core.config import load_config
from nas.engine.data.build import build_source

batches = build_source(load_config(yaml_io.loads(sys.argv[1])).data).train_batches(8, 0, 0)
next(batches)                  # the epoch is abandoned here, still referenced at exit, its workers busy
print("one batch", flush=True)
"""


@pytest.mark.slow
def test_an_epoch_abandoned_with_busy_workers_does_not_hold_the_exit(tree):
    """Workers ignore SIGTERM, so multiprocessing's exit handler would wait for them forever; and
    once torch's exit hook has run, its own worker shutdown does nothing."""
    root, _ = tree
    config = yaml_io.dumps(tree_config(root, workers=2))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    with subprocess.Popen([sys.executable, "-c", _ONE_BATCH_THEN_EXIT, config], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout.readline() == "one batch\n", process.stderr.read()[-2000:]
            returncode = process.wait(timeout=20)       # a few seconds of interpreter teardown
        except subprocess.TimeoutExpired:
            pytest.fail("the process still runs 20 s after its last batch: its exit waits for its workers")
        finally:
            process.kill()
        assert returncode == 0, process.stderr.read()[-2000:]
