"""Run configuration: frozen dataclasses loaded from YAML with dotted overrides (`--set` of the CLI).

`load_config(name_or_path, overrides)` is the only way YAML becomes a `RunConfig`. Every
problem is collected in one pass and reported as `FILE: key.path: problem`, or blamed on what
caused it under the overrides (`overrides: key.path: problem` for a bad overridden value,
`overrides KEY: ...` for a check across keys that only an override made fail; the CLI names
them `--set`). Plugin sections
(`space`, `strategy.sampler`, `strategy.distill`, `strategy` itself) are `{name, options}`:
the options may sit under `options:` or inline beside `name`, and a bare string is `{name}`.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nas.core import yaml_io
from nas.core.errors import ConfigError, NasError, clip, int_problems
from nas.core.registry import DISTILL_LOSSES, SAMPLERS, SPACES, STRATEGIES, Registry
from nas.core.schema import Problems, convert_dataclass, to_plain
from nas.core.search_config import SearchConfig

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


@dataclass(frozen=True)
class Plugin:
    """A registered plugin by name, with its validated options dataclass."""

    name: str
    options: Any = None


@dataclass(frozen=True)
class AugmentConfig:
    """Training augmentation. crop_padding and hflip act on whole batches (in memory or
    streamed, the same tensors); the per-image timm transforms need the streaming path; mixup
    and cutmix (timm `Mixup`, soft labels) act on whole batches on either path."""

    crop_padding: int = 2       # random crop of the original size after zero padding (0: off)
    hflip: bool = True
    random_resized_crop: bool = False   # per image: timm RandomResizedCrop to the image size
    scale: tuple[float, ...] = (0.08, 1.0)    # its range of crop areas (fractions of the image)
    ratio: tuple[float, ...] = (0.75, 4 / 3)  # its range of crop aspect ratios
    auto_augment: str | None = None     # per image: timm policy, e.g. rand-m9-mstd0.5 (RandAugment)
    color_jitter: float = 0.0           # per image: brightness/contrast/saturation jitter (0: off)
    re_prob: float = 0.0                # per image: random-erasing probability
    re_mode: Literal["const", "rand", "pixel"] = "pixel"
    mixup_alpha: float = 0.0            # per batch: mixup Beta(alpha, alpha) (0: off)
    cutmix_alpha: float = 0.0           # per batch: cutmix Beta(alpha, alpha) (0: off)
    mixup_prob: float = 1.0             # probability that a batch is mixed at all
    mixup_switch_prob: float = 0.5      # probability of cutmix instead of mixup when both are on
    mixup_mode: Literal["batch", "pair", "elem"] = "batch"

    def __post_init__(self) -> None:
        problems = []
        if self.crop_padding < 0:
            problems.append(f"crop_padding: must be >= 0, got {self.crop_padding}")
        if self.random_resized_crop and self.crop_padding:
            problems.append("crop_padding: must be 0 with random_resized_crop (both crop the image)")
        for key, low, high in (("scale", 0.0, 1.0), ("ratio", 0.0, None)):
            pair = getattr(self, key)
            if len(pair) != 2 or not 0 < pair[0] <= pair[1] or (high is not None and pair[1] > high):
                problems.append(f"{key}: needs [low, high] with 0 < low <= high{f' <= {high:g}' if high else ''}, "
                                f"got {list(pair)}")
        for key in ("re_prob", "mixup_prob", "mixup_switch_prob"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                problems.append(f"{key}: must be in [0, 1], got {getattr(self, key)}")
        for key in ("color_jitter", "mixup_alpha", "cutmix_alpha"):
            if getattr(self, key) < 0:
                problems.append(f"{key}: must be >= 0, got {getattr(self, key)}")
        if self.auto_augment is not None:
            problems += _check_auto_augment(self.auto_augment)
        if problems:
            raise ConfigError(problems)

    @property
    def per_image(self) -> bool:
        """Whether a per-image (timm) transform is on, which only the streaming path applies."""
        return self.random_resized_crop or self.auto_augment is not None or self.color_jitter > 0 or self.re_prob > 0

    @property
    def mixes(self) -> bool:
        """Whether mixup or cutmix is on."""
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0


def _check_auto_augment(policy: str) -> list[str]:
    """Problems with a timm augmentation policy string (timm parses it: built once, then dropped)."""
    from timm.data.transforms_factory import create_transform

    try:
        create_transform(32, is_training=True, auto_augment=policy)
    except (AssertionError, KeyError, ValueError, IndexError, TypeError) as e:
        why = f" ({clip(str(e), 60)})" if str(e) else ""
        return [f"auto_augment: {clip(policy)!r} is not a timm augmentation policy{why}; e.g. rand-m9-mstd0.5 "
                f"(RandAugment), augmix-m5-w3, original, v0"]
    return []


@dataclass(frozen=True)
class PadaDataConfig:
    """How `data.sampling: pada` weighs images (see `nas.engine.data.importance`); the defaults
    are the PA&DA authors' code, the alternatives this project's former rules."""

    mix_schedule: Literal["published", "shifted"] = "published"   # tau at the end of epoch e: e/E or (e+1)/E
    undrawn_norm: Literal["zero", "keep"] = "zero"                 # an image the epoch did not draw: 0 or its last norm


@dataclass(frozen=True)
class DataConfig:
    name: Literal["fashion_mnist", "cifar10", "cifar100", "imagefolder"] = "fashion_mnist"
    root: str | None = None      # None: /usr/share/datasets/fashion-mnist for fashion_mnist
    val_size: int = 5000         # fixed seeded slice of the training images, whatever train_size is
    train_size: int | None = None  # None: every training image left after the validation split
    split_seed: int = 0
    image_size: int | None = None  # imagefolder only: images are resized and centre-cropped to it
    num_classes: int | None = None  # imagefolder only: the classifier's classes (null: counted from train/)
    in_memory: bool | Literal["auto"] = "auto"   # auto: streams imagefolder and per-image transforms
    workers: int = 4             # DataLoader worker processes of the streaming path (0: in-process; at most one per CPU)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    sampling: Literal["uniform", "pada"] = "uniform"   # pada: next epoch's images by importance (PA&DA)
    pada: PadaDataConfig = field(default_factory=PadaDataConfig)   # settings of sampling: pada

    def __post_init__(self) -> None:
        problems = []
        if self.sampling == "pada" and self.streams:
            problems.append("sampling: pada draws each epoch's images from in-memory data; set data.in_memory: "
                            "true (Fashion-MNIST, CIFAR) or data.sampling: uniform")
        if self.sampling != "pada" and self.pada != PadaDataConfig():
            problems.append("pada: applies only with data.sampling: pada (this run samples uniformly); remove it")
        problems += int_problems(1, val_size=self.val_size)
        if self.train_size is not None and self.train_size < 1:
            problems.append(f"train_size: must be >= 1 or null, got {self.train_size}")
        if self.name == "imagefolder" and self.image_size is None:
            problems.append("image_size: required for imagefolder data")
        if self.num_classes is not None and (self.name != "imagefolder" or self.num_classes < 1):
            problems.append(f"num_classes: must be >= 1, for imagefolder data only (got {self.num_classes} "
                            f"for {self.name})")
        if self.workers < 0:
            problems.append(f"workers: must be >= 0, got {self.workers}")
        if self.in_memory is True and self.augment.per_image:
            problems.append("in_memory: true batches whole tensors and cannot apply the per-image transforms "
                            "of data.augment (random_resized_crop, auto_augment, color_jitter, re_prob); "
                            "use auto or false")
        if problems:
            raise ConfigError(problems)

    @property
    def streams(self) -> bool:
        """Whether batches come from the streaming path (a DataLoader over lazily read images)
        rather than from tensors held in memory: `in_memory: auto` streams ImageFolder trees
        and any data with per-image transforms, and keeps Fashion-MNIST and CIFAR in memory."""
        if self.in_memory == "auto":
            return self.name == "imagefolder" or self.augment.per_image
        return not self.in_memory


@dataclass(frozen=True)
class OptimizerConfig:
    name: str = "sgd"            # any timm optimizer name (timm.optim.list_optimizers())
    lr: float = 0.1
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 5e-4   # never applied to batch-norm parameters and biases
    betas: tuple[float, ...] | None = None
    eps: float | None = None

    def __post_init__(self) -> None:
        problems = [f"{key}: must be a finite number, got {getattr(self, key)}"
                    for key in ("lr", "momentum", "weight_decay", "eps")
                    if getattr(self, key) is not None and not math.isfinite(getattr(self, key))]
        if self.lr <= 0:
            problems.append(f"lr: must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            problems.append(f"weight_decay: must be >= 0, got {self.weight_decay}")
        if self.betas is not None and len(self.betas) != 2:
            problems.append(f"betas: needs two values, got {list(self.betas)}")
        if problems:
            raise ConfigError(problems)


@dataclass(frozen=True)
class SchedulerConfig:
    name: Literal["cosine", "tanh", "poly", "step", "constant"] = "cosine"   # timm schedulers
    warmup_steps: int = 200      # linear warm-up from warmup_lr, in iterations
    warmup_lr: float = 1e-5
    min_lr: float = 0.0
    decay_rate: float = 0.1      # step: LR factor every decay_steps; poly: the power
    decay_steps: int | None = None   # step schedule period (None: a third of the run)

    def __post_init__(self) -> None:
        problems = [f"{key}: must be a finite number, got {getattr(self, key)}"
                    for key in ("warmup_lr", "min_lr", "decay_rate") if not math.isfinite(getattr(self, key))]
        if self.warmup_steps < 0:
            problems.append(f"warmup_steps: must be >= 0, got {self.warmup_steps}")
        if problems:
            raise ConfigError(problems)


@dataclass(frozen=True)
class GradClipConfig:
    value: float | None = 1.0    # element-wise value clip (AttentiveNAS/AlphaNet); null: off
    norm: float | None = None    # total-norm clip; null: off


@dataclass(frozen=True)
class CheckpointConfig:
    every_steps: int = 100
    every_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.every_steps < 1 or self.every_seconds <= 0:
            raise ConfigError("every_steps, every_seconds: must be positive")


@dataclass(frozen=True)
class TrainConfig:
    epochs: int | None = 4       # exactly one of epochs and steps
    steps: int | None = None
    batch_size: int = 128        # global: divided over DDP ranks
    seed: int = 0
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    grad_clip: GradClipConfig = field(default_factory=GradClipConfig)
    threads: int | None = None   # None: respect OMP_NUM_THREADS / torch's default
    precision: Literal["fp32", "bf16"] = "fp32"   # bf16 autocast: for GPUs (on CPUs see nas.engine.precision)
    channels_last: bool = True
    # standalone trainings (nas.engine.fidelity.variant): auto (the rules: compiled; bf16, not for ground
    # truths: nas.engine.precision), eager, or compiled
    accelerate: Literal["auto", "eager", "compiled"] = "auto"
    log_every: int = 20
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def __post_init__(self) -> None:
        problems = []
        if (self.epochs is None) == (self.steps is None):
            problems.append("epochs, steps: give exactly one of them (the other null)")
        optional = {key: getattr(self, key) for key in ("epochs", "steps", "threads") if getattr(self, key) is not None}
        problems += int_problems(1, **optional, batch_size=self.batch_size)
        if problems:
            raise ConfigError(problems)


@dataclass(frozen=True)
class EvalConfig:
    bn_recal_batches: int = 20   # training batches for BN recalibration before each evaluation
    bn_recal_batch_size: int = 128
    batch_size: int = 256

    def __post_init__(self) -> None:
        problems = int_problems(1, bn_recal_batches=self.bn_recal_batches,
                                bn_recal_batch_size=self.bn_recal_batch_size, batch_size=self.batch_size)
        if problems:
            raise ConfigError(problems)


_FINETUNE_LENGTH = re.compile(r"^(?:(\d+)|(\d*\.?\d+)e|(\d*\.?\d+)%|(\d*\.?\d+e\d+))$")


def finetune_length_problem(length: Any) -> str | None:
    """Why `length` is not a fine-tune length (`0`, `N` steps, also as `1e4`, `Ne` epochs, `P%` of
    the run's training steps), or None."""
    if isinstance(length, bool) or not isinstance(length, (int, str)):
        return f"expected N steps, Ne epochs or P% of the run's steps (0: off), got {clip(length)}"
    text = str(length).strip()
    match = _FINETUNE_LENGTH.match(text)
    if isinstance(length, int) and length < 0 or not match or match.group(4) and not float(text).is_integer():
        return f"cannot read {length!r}; use N steps (e.g. 400), Ne epochs (e.g. 1e) or P% of the run's steps (e.g. 20%), 0 for none"
    return None


@dataclass(frozen=True)
class FinetuneConfig:
    """How `nas export` trains the chosen subnet alone from its inherited weights before saving it."""

    length: int | str = 0        # N steps, Ne epochs or P% of the run's training steps; 0: ship the inherited weights
    lr: float | None = None      # peak learning rate, cosine to 0, no warm-up (None: the run's own train.optimizer.lr)
    distill: bool = False        # also learn from the max subnet's predictions (half the loss)
    seed: int = 0                # the batch order of the fine-tune

    def __post_init__(self) -> None:
        problems = []
        problem = finetune_length_problem(self.length)
        if problem:
            problems.append(f"length: {problem}")
        if self.lr is not None and not (isinstance(self.lr, (int, float)) and self.lr > 0):
            problems.append(f"lr: must be > 0, got {clip(self.lr)}")
        if problems:
            raise ConfigError(problems)

    @property
    def enabled(self) -> bool:
        return float(str(self.length).rstrip("e%")) > 0


@dataclass(frozen=True)
class ExportConfig:
    """What `nas export` ships; read by `nas search` too, which optimises for what is shipped."""

    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)


@dataclass(frozen=True)
class StrategyConfig:
    name: str = "one_shot"
    options: Any = None
    sampler: Plugin = field(default_factory=lambda: Plugin("sandwich"))
    distill: Plugin = field(default_factory=lambda: Plugin("kl"))


@dataclass(frozen=True)
class RunConfig:
    """A whole run: what to search over, on which data, how to train and evaluate."""

    space: Plugin
    data: DataConfig = field(default_factory=DataConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    search: SearchConfig = field(default_factory=SearchConfig)   # what `nas search RUN` does unless told
    source: str = field(default="<dict>", compare=False)

    def to_dict(self) -> dict:
        """Plain data that `load_config` reads back to an equal config."""
        data = to_plain(self)
        data.pop("source")
        return data


_PLUGIN_SECTIONS: dict[tuple[str, ...], Registry] = {
    ("space",): SPACES, ("strategy",): STRATEGIES,
    ("strategy", "sampler"): SAMPLERS, ("strategy", "distill"): DISTILL_LOSSES,
}
_STRATEGY_KEYS = {"name", "options", "sampler", "distill"}


def _normalise_plugin(section: Any, fixed: set[str] = frozenset()) -> Any:
    """`"x"` -> `{name: x, options: {}}`; inline option keys move under `options`."""
    if isinstance(section, str):
        return {"name": section, "options": {}}
    if not isinstance(section, dict):
        return section
    section = dict(section)
    inline = {k: section.pop(k) for k in list(section) if k not in fixed | {"name", "options"}}
    if inline and isinstance(section.get("options", {}), dict):
        section["options"] = {**(section.get("options") or {}), **inline}
    else:
        section.update(inline)
    return section


def _normalise(raw: dict) -> dict:
    raw = copy.deepcopy(raw)
    if "space" in raw:
        raw["space"] = _normalise_plugin(raw["space"])
    strategy = raw.get("strategy")
    if isinstance(strategy, dict):
        strategy = _normalise_plugin(strategy, fixed=_STRATEGY_KEYS - {"name", "options"})
        for key in ("sampler", "distill"):
            if key in strategy:
                strategy[key] = _normalise_plugin(strategy[key])
        raw["strategy"] = strategy
    return raw


def _set_path(raw: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = raw
    for i, key in enumerate(keys[:-1]):
        plugin = _PLUGIN_SECTIONS.get(tuple(keys[: i + 1]))
        child = node.get(key)
        if isinstance(child, str):
            child = node[key] = {"name": child}
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
        nxt = keys[i + 1]
        if plugin is not None and nxt not in {"name", "options"} | (
                _STRATEGY_KEYS if plugin is STRATEGIES else set()):
            node = node.setdefault("options", {})
            if not isinstance(node, dict):
                raise ConfigError(f"overrides {dotted}: {'.'.join(keys[:i + 1])}.options is not a mapping")
    node[keys[-1]] = value


def _plugin(registry: Registry, section: Any, path: str, problems: Problems,
            options_path: str | None = None) -> Plugin | None:
    """The plugin of a `{name, options}` section; problems with its options are reported under
    `options_path` (default `PATH.options`)."""
    if not isinstance(section, dict) or not isinstance(section.get("name"), str):
        problems.add(path, f"expected a name or a mapping with 'name', got {clip(section)}")
        return None
    unknown = set(section) - {"name", "options"}
    if unknown:
        problems.add(path, f"unknown keys {sorted(unknown)} beside name/options")
        return None
    try:
        entry = registry.get(section["name"])
    except NasError as e:
        problems.add(f"{path}.name", str(e).split(": ", 1)[-1])
        return None
    options_path = options_path if options_path is not None else f"{path}.options"
    options = convert_dataclass(entry.options, section.get("options") or {}, options_path, problems)
    return Plugin(section["name"], options) if dataclasses.is_dataclass(options) else None


def build_config(raw: dict, source: str = "<dict>") -> RunConfig:
    """Validate plain data into a `RunConfig`, raising one `ConfigError` with every problem,
    each blamed on `source`."""
    config, problems = _validated(raw, source)
    if config is None:
        raise ConfigError(problems.lines(lambda path, problem: source))
    return config


def _validated(raw: dict, source: str) -> tuple[RunConfig | None, Problems]:
    """The `RunConfig` of plain data (None when there are problems) and the problems found."""
    problems = Problems()
    raw = _normalise(raw)
    plugins: dict[str, Any] = {}
    if "space" not in raw:
        problems.add("space", "missing (required): e.g. space: {name: mobilenetv3}")
    else:
        plugins["space"] = _plugin(SPACES, raw.pop("space"), "space", problems)
    strategy = raw.pop("strategy", {}) or {}
    if not isinstance(strategy, dict):
        problems.add("strategy", f"expected a mapping, got {clip(strategy)}")
        strategy = {}
    strategy.setdefault("name", "one_shot")
    strategy_plugins = {
        key: _plugin(registry, strategy.pop(key, default), f"strategy.{key}", problems)
        for key, registry, default in (("sampler", SAMPLERS, {"name": "sandwich"}),
                                       ("distill", DISTILL_LOSSES, {"name": "kl"}))}
    unknown = set(strategy) - {"name", "options"}
    for key in unknown:
        problems.add(f"strategy.{key}", f"unknown key; allowed: {', '.join(sorted(_STRATEGY_KEYS))}")
        strategy.pop(key)
    # the strategy's own options sit beside sampler and distill in YAML: report them there
    top = _plugin(STRATEGIES, strategy, "strategy", problems, options_path="strategy")
    body = convert_dataclass(_RunBody, raw, "", problems)
    if problems:
        return None, problems
    return RunConfig(space=plugins["space"], data=body.data, train=body.train, eval=body.eval, export=body.export,
                     search=body.search,
                     strategy=StrategyConfig(top.name, top.options, strategy_plugins["sampler"],
                                             strategy_plugins["distill"]), source=source), problems


def _plain_path(path: str) -> str:
    return path.replace(".options.", ".").replace(".options", "")


def _names_override(path: str, overridden: list[str]) -> bool:
    """Whether a problem's key path (one key, `train.optimizer.lr`, or several keys of one
    section, `train.epochs, steps`) is a key given by `--set`, inside one or around one."""
    head, _, last = _plain_path(path).rpartition(".")
    named = [f"{head}.{key}" if head else key for key in last.split(", ")] if path else []
    keys = [_plain_path(o) for o in overridden]
    return any(k == n or n.startswith((k + ".", k + "[")) or k.startswith(n + ".") for k in keys for n in named)


class _Blame:
    """What caused each problem of a config with `--set` overrides: `--set` when the problem
    names an overridden key; the file when the file alone has the problem; otherwise the
    overrides without which it disappears (a check across keys, `data.sampling` failing after
    `--set data.in_memory=false`), found by validating again without each of them."""

    def __init__(self, raw: dict, parsed: list[tuple[str, Any]], source: str):
        self.raw, self.parsed, self.source = raw, parsed, source
        self._found: dict[tuple[int, ...], set[tuple[str, str]] | None] = {}

    def _problems_with(self, chosen: tuple[int, ...]) -> set[tuple[str, str]] | None:
        """The problems of the file with only the overrides at indices `chosen` (None: they
        cannot be applied on their own)."""
        if chosen not in self._found:
            try:
                _, problems = _validated(_with_overrides(self.raw, [self.parsed[i] for i in chosen]), self.source)
                self._found[chosen] = set(problems)
            except ConfigError:
                self._found[chosen] = None
        return self._found[chosen]

    def __call__(self, path: str, problem: str) -> str:
        keys = [key for key, _ in self.parsed]
        if _names_override(path, keys):
            return "overrides"
        if (path, problem) in (self._problems_with(()) or set()):
            return self.source
        every = range(len(keys))
        needed = [keys[i] for i in every
                  if (path, problem) not in (self._problems_with(tuple(j for j in every if j != i)) or set())]
        enough = [keys[i] for i in every if (path, problem) in (self._problems_with((i,)) or set())]
        return "overrides " + ", ".join(dict.fromkeys(needed or enough or keys))


@dataclass(frozen=True)
class _RunBody:
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    search: SearchConfig = field(default_factory=SearchConfig)


def shipped_configs() -> list[str]:
    """Names of the configs shipped in `nas/configs/`."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A path as given, or a shipped config by name (with or without `.yaml`)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = CONFIG_DIR / f"{Path(str(name_or_path)).stem}.yaml"
    if path.suffix in ("", ".yaml") and len(path.parts) == 1 and shipped.is_file():
        return shipped
    from nas.core.registry import did_you_mean
    raise ConfigError(f"{name_or_path}: no such config file or shipped config"
                      f"{did_you_mean(path.stem, shipped_configs())}; shipped: {', '.join(shipped_configs())}")


def config_spelling(config: RunConfig) -> str | None:
    """How a command names `config`'s file unambiguously: `NAME.yaml` for a shipped config (never
    a run's name: the run NAME is spelt `runs/NAME`), else its path; None for a config built
    from a dict."""
    if config.source == "<dict>":
        return None
    path = Path(config.source)
    return path.name if path.parent.resolve() == CONFIG_DIR.resolve() else str(path)


def parse_overrides(overrides: list[str] | tuple[str, ...]) -> list[tuple[str, Any]]:
    """`key.path=value` strings as (path, parsed value) pairs."""
    parsed = []
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
            raise ConfigError(f"overrides {clip(item)}: expected KEY.PATH=VALUE, e.g. train.epochs=3")
        parsed.append((key.strip(), yaml_io.parse_scalar(text, f"overrides {key.strip()}")))
    return parsed


def load_config(name_or_path: str | Path | dict, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Load a shipped config by name, a YAML file, or a plain dict, with `--set` overrides."""
    if isinstance(name_or_path, dict):
        raw, source = copy.deepcopy(name_or_path), "<dict>"
    else:
        path = resolve_config_path(name_or_path)
        raw, source = yaml_io.load_mapping(path), str(path)
    raw = _normalise(raw)
    parsed = parse_overrides(overrides)
    config, problems = _validated(_with_overrides(raw, parsed), source)
    if config is None:
        raise ConfigError(problems.lines(_Blame(raw, parsed, source)))
    return config


def _with_overrides(raw: dict, parsed: list[tuple[str, Any]]) -> dict:
    """A copy of `raw` with the `--set` values applied in order."""
    raw = copy.deepcopy(raw)
    for key, value in parsed:
        _set_path(raw, key, value)
    return raw
