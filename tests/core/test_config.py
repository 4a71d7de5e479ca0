"""Config loading: shipped configs validate; every kind of bad input is one clear line, exit 2."""
from __future__ import annotations

import pytest

from nas import cli
from nas.core.config import RunConfig, load_config, shipped_configs
from nas.core.errors import ConfigError


@pytest.mark.parametrize("name", shipped_configs())
def test_every_shipped_config_validates_and_round_trips(name):
    config = load_config(name)
    assert isinstance(config, RunConfig)
    assert load_config(config.to_dict()) == config


def test_overrides_parse_like_the_file():
    config = load_config("fashion_mnist_mbv3", ["train.optimizer.lr=1e-3", "strategy.sampler.num_random=1",
                                                "space.options.resolutions=[28]", "train.epochs=null",
                                                "train.steps=5"])
    assert config.train.optimizer.lr == 0.001 and isinstance(config.train.optimizer.lr, float)
    assert config.strategy.sampler.options.num_random == 1
    assert config.space.options.resolutions == (28,)
    assert config.train.steps == 5 and config.train.epochs is None


def test_plugin_sections_accept_shorthand_and_inline_options():
    a = load_config({"space": "mobilenetv3", "strategy": {"sampler": {"name": "sandwich", "num_random": 1}}})
    b = load_config({"space": {"name": "mobilenetv3", "options": {}},
                     "strategy": {"sampler": {"name": "sandwich", "options": {"num_random": 1}}}})
    assert a == b


def _write(tmp_path, text: str, name: str = "run.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _run_cli(argv, capsys):
    code = cli.main(argv)
    err = capsys.readouterr().err
    return code, err


@pytest.mark.parametrize("text, expected", [
    ("space: mobilenetv3\ntrain: {epocs: 3}\n", r"run.yaml: train.epocs: unknown key \(did you mean 'epochs'\?\)"),
    ("space: mobilenetv3\ntrain: {batch_size: big}\n", r"run.yaml: train.batch_size: expected int, got big"),
    ("space: mobilenetv3\ntrain: {accelerate: fast}\n",
     r"run.yaml: train.accelerate: fast is not allowed; choose one of 'auto', 'eager', 'compiled'$"),
    ("space: mobilenetv3\ntrain:\n  epochs: 1\n  epochs: 2\n", r"run.yaml: line 4, column 3: duplicate key 'epochs'"),
    ("space: mobilenetv3\nstrategy: {sampler: sandwitch}\n",
     r"run.yaml: strategy.sampler.name: unknown sampler 'sandwitch' \(did you mean 'sandwich'\?\); available:"),
    ("space: mobilenetv3\ntrain: {epochs: [1\n", r"run.yaml: line 3, column 1: .*expected ',' or '\]'"),
    ("space: mobilenetv3\ntrain: !!python/object:os.system {}\n", r"run.yaml: line 2, column 8: tag .* is not allowed"),
    ("", r"run.yaml: the file is empty"),
    ("- a\n- b\n", r"run.yaml: the top level must be a mapping"),
    ("space: mobilenetv4\n", r"run.yaml: space.name: unknown search space 'mobilenetv4' \(did you mean 'mobilenetv3'\?\)"),
])
def test_bad_config_is_one_line_naming_the_key_exit_2(tmp_path, capsys, text, expected):
    import re

    code, err = _run_cli(["space", _write(tmp_path, text)], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.search(expected, lines[0]), lines[0]


def test_non_utf8_file(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_bytes(b"space: mobilenetv3\nname: \xff\xfe\n")
    code, err = _run_cli(["space", str(path)], capsys)
    assert code == 2 and "line 2: not UTF-8" in err


def test_every_problem_reported_in_one_pass_at_most_three_lines(tmp_path, capsys):
    text = "space: {name: mobilenetv3, options: {stem_width: 12}}\ntrain: {epocs: 3, seed: x}\ndata: {val_size: 0}\n"
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))
    assert len(info.value.problems) == 4
    joined = "\n".join(info.value.problems)
    for key in ("space.options.stem_width", "train.epocs", "train.seed", "data.val_size"):
        assert key in joined
    code, err = _run_cli(["space", _write(tmp_path, text)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 3 and "and 2 more problems" in err


def test_override_problems_name_set(capsys):
    code, err = _run_cli(["space", "fashion_mnist_mbv3", "--set", "train.lr=0.1"], capsys)
    assert code == 2 and err.strip().endswith("allowed: epochs, steps, batch_size, seed, optimizer, scheduler, "
                                              "grad_clip, threads, precision, channels_last, accelerate, log_every, checkpoint")
    assert "--set: train.lr: unknown key" in err
    code, err = _run_cli(["space", "fashion_mnist_mbv3", "--set", "train.epochs"], capsys)
    assert code == 2 and "--set train.epochs: expected KEY.PATH=VALUE" in err


def test_unknown_config_name_suggests_a_shipped_one(capsys):
    code, err = _run_cli(["space", "fashion_mnist_mbv"], capsys)
    assert code == 2 and "did you mean 'fashion_mnist_mbv3'" in err


def test_echoed_values_are_cut_to_80_characters(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, f"space: mobilenetv3\ntrain: {{seed: {'x' * 200}}}\n"))
    assert "x" * 78 not in str(info.value) and "..." in str(info.value)


@pytest.mark.parametrize("override, expected", [
    ("data.in_memory=sometimes", r"--set: data.in_memory: expected bool or 'auto', got sometimes"),
    ("data.workers=-2", r"--set: data.workers: must be >= 0, got -2"),
    ("data.augment.auto_augment=rand-q9", r"--set: data.augment.auto_augment: 'rand-q9' is not a timm augmentation "
                                          r"policy \(Unknown RandAugment config section\); e.g. rand-m9-mstd0.5"),
    ("data.augment.scale=[0.5,0.2]", r"--set: data.augment.scale: needs \[low, high\] with 0 < low <= high <= 1"),
    ("data.augment.ratio=[0,1]", r"--set: data.augment.ratio: needs \[low, high\] with 0 < low <= high, got \[0.0, 1.0\]"),
    ("data.augment.re_prob=1.5", r"--set: data.augment.re_prob: must be in \[0, 1\], got 1.5"),
    ("data.augment.cutmix_alpha=-1", r"--set: data.augment.cutmix_alpha: must be >= 0, got -1"),
    ("data.augment.mixup_mode=row", r"--set: data.augment.mixup_mode: row is not allowed; choose one of 'batch'"),
    ("data.augment.mixup_alpah=0.2", r"--set: data.augment.mixup_alpah: unknown key \(did you mean 'mixup_alpha'\?\)"),
    ("data.augment.random_resized_crop=true",
     r"^nas space: error: --set data.augment.random_resized_crop: data.augment.crop_padding: must be 0 with "
     r"random_resized_crop \(both crop"),         # the --set that broke the rule is blamed, not the shipped file
])
def test_data_keys_are_checked_in_one_line(capsys, override, expected):
    import re

    code, err = _run_cli(["space", "fashion_mnist_vit", "--set", override], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert re.search(expected, lines[0]), lines[0]


@pytest.mark.parametrize("config, override, expected", [
    ("fashion_mnist_vit", "train.batch_size=0", "--set: train.batch_size: must be an integer >= 1, got 0"),
    ("fashion_mnist_vit", "data.val_size=0", "--set: data.val_size: must be an integer >= 1, got 0"),
    ("fashion_mnist_vit", "space.options.head_dim=0", "--set: space.options.head_dim: must be an integer >= 1, got 0"),
    ("fashion_mnist_cell201", "space.options.channels=-3",
     "--set: space.options.channels: must be an integer >= 1, got -3"),
])
def test_counts_below_one_are_refused_with_the_check_int_message(capsys, config, override, expected):
    code, err = _run_cli(["space", config, "--set", override], capsys)
    assert code == 2 and err.strip().splitlines()[-1] == f"nas space: error: {expected}", err


def test_in_memory_cannot_apply_per_image_transforms(capsys):
    code, err = _run_cli(["space", "fashion_mnist_mbv3", "--set", "data.in_memory=true",
                          "data.augment.auto_augment=rand-m9-mstd0.5"], capsys)
    assert code == 2 and "--set: data.in_memory: true batches whole tensors and cannot apply the per-image " in err


def test_streaming_is_chosen_by_data_and_transforms():
    def streams(*overrides):
        return load_config("fashion_mnist_mbv3", list(overrides)).data.streams

    assert not streams() and streams("data.in_memory=false") and not streams("data.in_memory=true")
    assert streams("data.augment.re_prob=0.2") and streams("data.augment.color_jitter=0.4")
    assert not streams("data.augment.mixup_alpha=0.2")            # mixup mixes whole batches: either path
    assert load_config("imagenet_mbv3").data.streams and not load_config("cifar10_mbv3").data.streams
