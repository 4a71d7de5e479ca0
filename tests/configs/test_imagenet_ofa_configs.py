"""The shipped Once-for-All configs: OFA's own counts, read without any data on disk."""
from __future__ import annotations

import json

import pytest

from nas.api import build_space
from nas.cli import main
from nas.core.config import load_config
from nas.core.errors import ConfigError

# OFA's counts (ofa.nas.efficiency_predictor.Mbv3FLOPsModel and its active subnets' parameters),
# 1000 classes: (max MACs at 224 px, max params, min MACs at 128 px, min params).
OFA_COUNTS = {"imagenet_ofa_mbv3_w10": (566_170_656, 7_664_760, 41_476_224, 3_410_792),
              "imagenet_ofa_mbv3_w12": (843_101_040, 10_701_632, 65_536_896, 4_602_456)}


@pytest.mark.parametrize("name", sorted(OFA_COUNTS))
def test_ofa_configs_have_ofas_counts_and_resolutions(name):
    space = build_space(load_config(name))
    big, small = space.max(), space.min()
    assert (big["resolution"], small["resolution"]) == (224, 128)
    assert space.choices()["resolution"] == tuple(range(128, 225, 4))
    assert (space.macs(big), space.params(big), space.macs(small), space.params(small)) == OFA_COUNTS[name]


def test_nas_space_reads_the_number_of_classes_from_the_config_without_data(capsys):
    assert main(["space", "imagenet_ofa_mbv3_w10", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["macs"] == {"min": 41_476_224, "max": 566_170_656}


def test_num_classes_is_for_imagefolder_data_only():
    with pytest.raises(ConfigError, match="num_classes: must be >= 1, for imagefolder data only"):
        load_config("fashion_mnist_mbv3", ["data.num_classes=10"])
