"""`--device`: parsing, checking against the machine's CUDA devices, torchrun's per-rank choice,
and one-line errors from every verb that computes."""
from __future__ import annotations

import pytest
import torch

from nas import cli
from nas.core.errors import ConfigError
from nas.engine import distributed
from nas.engine.devices import module_device, resolve_device


@pytest.fixture
def two_gpus(monkeypatch):
    """Pretend this machine has cuda:0 and cuda:1 (the parsing logic only asks torch.cuda these)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_parsing_with_two_gpus(two_gpus):
    assert resolve_device(None) == torch.device("cuda", 0)          # default: cuda when available
    assert resolve_device("cuda") == torch.device("cuda", 0)        # always an index
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device(" cpu ") == torch.device("cpu")
    assert resolve_device(torch.device("cuda", 1)) == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match=r"^device: cuda:2: this machine has 2 CUDA devices \(cuda:0 to cuda:1\)$"):
        resolve_device("cuda:2")


def test_parsing_without_gpu(no_gpu):
    assert resolve_device(None) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    for text in ("cuda", "cuda:0"):
        with pytest.raises(ConfigError, match=rf"^device: {text}: CUDA is not available here .*use device='cpu'$"):
            resolve_device(text)


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:x", "cpu:0", "cuda:-1", "CUDA", "", "cuda:0:1"])
def test_malformed_devices_name_the_flag(text):
    with pytest.raises(ConfigError) as err:
        resolve_device(text, "--latency-device")
    assert str(err.value).startswith("--latency-device: ") and "use cpu, cuda or cuda:N" in str(err.value)


def test_torchrun_ranks_take_cuda_local_rank(two_gpus, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert distributed.detect().device == "cuda:1"
    assert distributed.detect("cuda").device == "cuda:1"
    assert distributed.detect("cpu").device == "cpu"
    with pytest.raises(ConfigError, match="^device: cuda:0: under torchrun each rank uses cuda:LOCAL_RANK"):
        distributed.detect("cuda:0")
    monkeypatch.setenv("LOCAL_RANK", "3")
    with pytest.raises(ConfigError, match=r"LOCAL_RANK 3\): cuda:3: this machine has 2 CUDA devices"):
        distributed.detect()


def test_one_process_keeps_the_chosen_device(two_gpus, monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.detect("cuda:1") == distributed.DistEnv(0, 1, 0, "cuda:1")
    assert distributed.detect(None).device == "cuda:0"


def test_module_device():
    assert module_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert module_device(torch.nn.ReLU()) == torch.device("cpu")
    assert module_device(torch.nn.BatchNorm1d(2, affine=False)) == torch.device("cpu")


@pytest.mark.parametrize("argv", [
    ["train", "fashion_mnist_mbv3", "--name", "x"],
    ["eval", "RUN", "--arch", "max"],
    ["export", "RUN", "--arch", "max"],
    ["search", "RUN"],
    ["latency-table", "RUN"],
])
@pytest.mark.parametrize("device, message", [("cuda:99", "--device: cuda:99: "),
                                             ("tpu", "--device: 'tpu' is not a device")])
def test_every_verb_rejects_an_unusable_device_in_one_line(tmp_path, capsys, monkeypatch, argv, device, message):
    if torch.cuda.is_available() and device.startswith("cuda"):
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    argv = [str(tmp_path / "RUN") if a == "RUN" else a for a in argv]
    code = cli.main([*argv, "--runs-dir", str(tmp_path), "--device", device])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert message in err, err
    assert not any(tmp_path.iterdir())           # refused before anything was written

