"""Error messages: cut at word boundaries, blamed on what the user typed, never echoing a password."""
from __future__ import annotations

import pytest

from nas.core import yaml_io
from nas.core.config import load_config
from nas.core.errors import ConfigError, clip_words
from searchers.optuna_storage import mask_url
from tests.support.tiny import tiny_config


def test_long_messages_are_cut_at_a_word_boundary():
    text = "PytorchStreamReader failed reading zip archive: failed finding central directory " * 3
    cut = clip_words(text, 60)
    assert cut == "PytorchStreamReader failed reading zip archive: failed..." and len(cut) <= 60
    assert clip_words("short\nsecond line", 60) == "short"
    assert clip_words("x" * 100, 20) == "x" * 17 + "..."          # one long word: cut, still marked


@pytest.mark.parametrize("overrides, blamed", [
    (["train.steps=5"], "overrides: train.epochs, steps: give exactly one of them"),
    (["space.depths=[[1]]"], "overrides space.depths: space.options.widths: needs one entry per stage"),
    (["train.optimizer.lr=.inf"], "overrides: train.optimizer.lr: must be a finite number, got inf"),
    (["train.optimizer.lr=.nan"], "overrides: train.optimizer.lr: expected float, got nan"),
    (["eval.batch_size=0"], "overrides: eval.batch_size: must be an integer >= 1, got 0"),
])
def test_problems_an_override_causes_are_blamed_on_the_overrides_not_on_the_file(overrides, blamed):
    with pytest.raises(ConfigError) as raised:
        load_config("fashion_mnist_mbv3", overrides)
    assert raised.value.problems[0].startswith(blamed), raised.value.problems


def test_a_problem_of_the_file_stays_blamed_on_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    config = tiny_config()
    config["space"] = {"name": "mobilenetv3", "options": {**config["space"]["options"], "widths": [[8]]}}
    path.write_text(yaml_io.dumps(config))
    with pytest.raises(ConfigError) as raised:
        load_config(path, ["train.seed=3"])
    assert raised.value.problems[0].startswith(f"{path}: space.options.widths: needs one entry per stage")


def test_a_check_across_keys_is_blamed_on_the_file_when_the_file_alone_fails_it(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml_io.dumps({**tiny_config(), "data": {"name": "imagefolder", "root": str(tmp_path),
                                                             "image_size": 8, "sampling": "pada"}}))
    with pytest.raises(ConfigError) as raised:
        load_config(path, ["data.train_size=100"])     # same section, unrelated to the problem
    assert raised.value.problems == [f"{path}: data.sampling: pada draws each epoch's images from in-memory data; "
                                     "set data.in_memory: true (Fashion-MNIST, CIFAR) or data.sampling: uniform"]


@pytest.mark.parametrize("overrides", [["data.train_size=100", "data.in_memory=false"],
                                       ["data.in_memory=false", "data.train_size=100"]])
def test_a_check_across_keys_is_blamed_on_the_override_that_broke_it(overrides):
    with pytest.raises(ConfigError) as raised:
        load_config("fashion_mnist_cell201_pada", overrides)
    assert raised.value.problems == ["overrides data.in_memory: data.sampling: pada draws each epoch's images from "
                                     "in-memory data; set data.in_memory: true (Fashion-MNIST, CIFAR) or "
                                     "data.sampling: uniform"]


def test_a_shipped_value_made_wrong_by_an_override_is_blamed_on_that_override():
    with pytest.raises(ConfigError) as raised:       # cell201's options are wrong only for mobilenetv3
        load_config("fashion_mnist_cell201_pada", ["train.seed=1", "space.name=mobilenetv3"])
    assert len(raised.value.problems) == 4
    assert all(line.startswith("overrides space.name: space.options.") for line in raised.value.problems)
    assert raised.value.problems[0].startswith("overrides space.name: space.options.image_size: unknown key; allowed: ")


@pytest.mark.parametrize("url, shown", [
    ("postgresql://bob:hunter2@db:5432/nas", "postgresql://bob:***@db:5432/nas"),
    ("mysql+pymysql://bob:p%40ss:w@db/nas", "mysql+pymysql://bob:***@db/nas"),
    ("postgresql://bob@db/nas", "postgresql://bob@db/nas"),
    ("sqlite:////tmp/a:b@c.db", "sqlite:////tmp/a:b@c.db"),
])
def test_storage_passwords_are_masked(url, shown):
    assert mask_url(url) == shown
    masked = "***" if "hunter2" in url else "hunter2"      # only the URL's own password is hidden
    assert mask_url(f"{url}: password hunter2 for bob rejected", url) == f"{shown}: password {masked} for bob rejected"
