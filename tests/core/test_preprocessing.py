"""The one input preprocessing: bilinear resize without antialiasing, per-channel normalisation,
and the metadata an export records of it (docs/exports.md)."""
from __future__ import annotations

import json

import torch

from nas.core.preprocessing import normalize, preprocessing_metadata, resize
from nas.engine.data.batches import normalize as normalize_uint8


def test_halving_a_side_averages_each_2x2_block():
    # align_corners=False samples source coordinate 2i + 0.5: the mean of pixels 2i and 2i+1;
    # with antialiasing a wider filter would also weigh the neighbours
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8) ** 1.5
    blocks = x.reshape(2, 3, 4, 2, 4, 2).mean(dim=(3, 5))
    torch.testing.assert_close(resize(x, 4), blocks, rtol=1e-6, atol=1e-4)


def test_doubling_a_side_interpolates_between_neighbours():
    x = torch.tensor([[[[0.0, 4.0]]]]).expand(1, 1, 2, 2)
    # output column j samples source (j + 0.5) / 2 - 0.5, clamped at 0: 0, 0.25, 0.75, 1 of the way
    assert resize(x, 4)[0, 0, 0].tolist() == [0.0, 1.0, 3.0, 4.0]


def test_an_input_of_the_size_is_returned_as_is():
    x = torch.rand(1, 1, 5, 5)
    assert resize(x, 5) is x


def test_normalize_per_channel_and_from_uint8():
    x = torch.tensor([0.0, 0.5, 1.0]).reshape(1, 3, 1, 1).expand(2, 3, 2, 2)
    mean, std = (0.5, 0.25, 0.0), (0.5, 0.25, 2.0)
    expected = torch.tensor([-1.0, 1.0, 0.5]).reshape(1, 3, 1, 1).expand(2, 3, 2, 2)
    assert torch.equal(normalize(x, mean, std), expected)
    images = torch.tensor([0, 51, 255], dtype=torch.uint8).reshape(1, 3, 1, 1)
    assert torch.equal(normalize_uint8(images, mean, std), normalize(images.float() / 255, mean, std))


def test_the_export_metadata_is_the_contract_s():
    meta = preprocessing_metadata(24, (0.2860,), (0.3530,))
    assert json.loads(json.dumps(meta)) == {"resolution": 24, "interpolation": "bilinear", "antialias": False,
                                            "mean": [0.2860], "std": [0.3530]}
    assert list(meta) == ["resolution", "interpolation", "antialias", "mean", "std"]


def test_normalize_puts_mean_and_std_on_the_inputs_device():
    x = torch.zeros(2, 3, 4, 4, device="meta")      # stands for an accelerator: a CPU mean would not mix
    out = normalize(x, (0.5, 0.5, 0.5), (0.2, 0.2, 0.2))
    assert out.device == x.device and out.shape == x.shape


def test_bicubic_doubling_uses_cubic_weights_over_four_neighbours():
    # PyTorch's bicubic (Keys, a = -0.75) at output column 1 of a doubling samples source 0.25:
    # weights of columns -1 (clamped to 0), 0, 1, 2 are w(1.25), w(0.25), w(0.75), w(1.75)
    def w(t: float) -> float:
        a = -0.75
        return ((a + 2) * t - (a + 3)) * t * t + 1 if t <= 1 else ((a * t - 5 * a) * t + 8 * a) * t - 4 * a

    row = torch.tensor([1.0, 2.0, 5.0, 3.0])
    x = row.expand(1, 1, 4, 4)
    expected = w(1.25) * 1.0 + w(0.25) * 1.0 + w(0.75) * 2.0 + w(1.75) * 5.0
    assert abs(resize(x, 8, "bicubic")[0, 0, 0, 1].item() - expected) < 1e-5
    assert preprocessing_metadata(8, [0.5], [0.5], "bicubic")["interpolation"] == "bicubic"
