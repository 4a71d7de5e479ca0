"""`nas` command line: one thin subcommand per `nas.api` function.

Bad input prints at most three one-line problems on stderr and exits 2; internal failures
exit 1 with a traceback; `--json` prints a machine-readable result on stdout. A training
stopped by SIGINT/SIGTERM exits 130/143 once its checkpoint is written. An `OSError` that
gets this far (paths the user gives are checked up front and fail with exit 2 naming the
flag; this is a disk that filled up or failed while writing) prints one line naming the
file and exits 1.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from nas.core.amounts import format_amount
from nas.core.errors import ConfigError, NasError
from nas.core.registry import SUPERNET_SCORE
from nas.core.wording import Words, render, wording

MAX_ERROR_LINES = 3
# Python API parameters whose flag has another dest (the rest share the flag's dest: `max_macs`).
API_PARAM_DESTS = {"ground_truth_dir": "ground_truth", "export_format": "format", "overrides": "set",
                   "options": "option", "priors": "prior"}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (`nas eval: error: argument --split: invalid choice ...`), exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Python API parameter -> the flag of `parser` that gives it (`max_macs` -> `--max-macs`),
    derived from the parser's own options, plus `API_PARAM_DESTS` where the names differ."""
    flags = {action.dest: max(action.option_strings, key=len) for action in parser._actions
             if action.option_strings and action.dest not in ("help", "version", argparse.SUPPRESS)}
    flags.update({param: flags[dest] for param, dest in API_PARAM_DESTS.items() if dest in flags})
    return flags


class FlagWords(Words):
    """The CLI's words for what the layers below write (`nas.core.wording`): a parameter by the
    flag of `command` that gives it (`max_macs: ...` -> `--max-macs: ...`, `{out}` -> `--out`),
    a suggested command by its command line."""

    def __init__(self, parser: argparse.ArgumentParser, command: str):
        self.parser, self.flags = parser, flag_names(command_parser(parser, command))

    def param(self, name: str) -> str:
        return self.flags.get(name, name)

    def ref(self, name: str, value: str | None) -> str:
        flag = self.flags.get(name, f"--{name.replace('_', '-')}")
        return flag if value is None or value == "True" else f"{flag} {value}"

    def command(self, name: str, args: Sequence[str], params: Mapping[str, str]) -> str:
        flags = flag_names(command_parser(self.parser, name))
        named = {k: flags.get(k, f"--{k.replace('_', '-')}") for k in params}
        options = [named[k] if v == "True" else f"{named[k]} {shlex.quote(v)}" for k, v in params.items()]
        return " ".join(["nas", name, *map(shlex.quote, args), *options])


def command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The subparser of `command`."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices[command]


def _version() -> str:
    from importlib import metadata
    try:
        return metadata.version("nas")
    except metadata.PackageNotFoundError:    # a source checkout run without `pip install -e .`
        return "(not installed: no version metadata)"


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def _names_a_run(target: str, runs_dir: str) -> bool:
    """Whether `nas space TARGET` means a run (a run directory, or a name under --runs-dir that
    is no config) rather than a config."""
    from nas.core.config import resolve_config_path

    if Path(target).is_dir():
        return True
    try:
        resolve_config_path(target)
        return False
    except ConfigError:
        if (Path(runs_dir) / target / "config.yaml").is_file():
            return True
        raise


def _names_a_config(target: str) -> bool:
    from nas.core.config import resolve_config_path
    try:
        resolve_config_path(target)
        return True
    except ConfigError:
        return False


def cmd_space(args: argparse.Namespace) -> int:
    from nas import api
    if args.supernet_pays:
        return _supernet_pays(args)
    if _names_a_run(args.config, args.runs_dir):
        if args.set:
            raise ConfigError("--set: overrides apply to a config, not to a trained run")
        summary = api.run_space_summary(api.load_run(args.config, args.runs_dir, device="cpu"))
    else:
        summary = api.space_summary(api.load_config(args.config, args.set))
    print(json.dumps(summary, indent=2) if args.json else api.format_space_summary(summary))
    return 0


def _supernet_pays(args: argparse.Namespace) -> int:
    """`nas space CONFIG|RUN --supernet-pays`: exit 0 where a supernet pays for the family, 1 where
    training each member alone is the cheaper path (`make run` takes it), saying why."""
    from nas import api
    if _names_a_run(args.config, args.runs_dir):
        if args.set:
            raise ConfigError("--set: overrides apply to a config, not to a trained run")
        source = api.find_run(args.config, args.runs_dir).root / "config.yaml"
        config = api.load_config(source)
    else:
        source, config = args.config, api.load_config(args.config, args.set)
    note = api.cheaper_path_note(config, source)
    if note is None and api.finetune_share(config) is None:
        print("a supernet may pay here, or not: export.finetune.length and the training count in steps and epochs, "
              "and an imagefolder's epoch is known only from its files; give data.train_size, or the length as a "
              "share of the run (e.g. 25%), to know")
        return 0
    print(note or "a supernet can pay here: each export fine-tunes for less than a whole training "
                  "(export.finetune.length), so a family from one supernet can cost less than training its members "
                  "alone")
    return 1 if note else 0


def cmd_train(args: argparse.Namespace) -> int:
    from nas import api

    if args.resume:
        name = args.name if args.name is not None else api.run_name(api.load_config(args.config))
        config = api.resume_config(name, args.set, args.runs_dir, args.checkpoint)
    else:
        config, name = api.load_config(args.config, args.set), args.name
    summary = api.train(config, name=name, resume=args.resume, runs_dir=args.runs_dir, progress=not args.quiet,
                        checkpoint=args.checkpoint, device=args.device)
    print(f"run: {summary.run}", file=sys.stderr)
    if args.json:
        _print_json(summary.to_json())
    return 0


def _arch_help() -> str:
    return ("max, min, a YAML/JSON arch file (e.g. a search's best.yaml), or for cell201 a NAS-Bench-201 string "
            "('|nor_conv_3x3~0|+|...|')")


def _named(space: Any, ident: str, arch: Any) -> str:
    """An arch id with the space's own spelling of the arch beside it, where it has one."""
    label = space.arch_label(arch)
    return f"{ident} ({label})" if label else ident


def cmd_eval(args: argparse.Namespace) -> int:
    from nas import api
    run = api.load_run(args.run, args.runs_dir, args.checkpoint, args.device)
    result = api.evaluate(run, args.arch, args.split)
    if args.json:
        _print_json(result.to_json())
    else:
        print(f"{_named(run.space, result.arch_id, result.arch)}  {args.split} top-1 {result.top1:.4f}  top-5 {result.top5:.4f}  "
              f"({result.n_images} images)  MACs {format_amount(result.macs)}  "
              f"params {format_amount(result.params)}  step {result.step}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from nas import api
    if args.family is not None:
        return cmd_export_family(args)
    run = api.load_run(args.run, args.runs_dir, args.checkpoint, args.device)
    settings = _finetune_settings(args, run)
    if args.distill and run.space.canonical(api.resolve_arch(run.space, args.arch)) == \
            run.space.canonical(run.space.max()):
        print("warning: --distill: the max subnet is its own teacher (half of the loss pulls it towards its own "
              "starting predictions); leave --distill out to fine-tune it on the labels alone", file=sys.stderr)
    record = api.export_subnet(run, args.arch, args.out, args.format, finetune=settings)
    if args.json:
        _print_json(record.to_json())
    else:
        tuned = record.record.get("finetune")
        if record.val_top1 is None:      # an imported run without data
            print(f"exported {record.arch_id} to {record.dir}: MACs {format_amount(record.macs)}, params "
                  f"{format_amount(record.params)}; {record.record['note']}")
            return 0
        how = (f" (fine-tuned {tuned['steps']} steps; inherited: val {record.record['inherited']['val_top1']:.4f}, "
               f"test {record.record['inherited']['test_top1']:.4f})" if tuned else " (inherited weights)")
        print(f"exported {_named(run.space, record.arch_id, api.resolve_arch(run.space, args.arch))} to {record.dir}: "
              f"val top-1 {record.val_top1:.4f}, test top-1 {record.test_top1:.4f}{how}, MACs {format_amount(record.macs)}, "
              f"params {format_amount(record.params)}")
    for note in ((record.record.get("search") or {}).get("note"), record.record.get("timm")):
        if note:
            print(f"note: {note}", file=sys.stderr)
    for warning in (record.record.get("ignores_input"), record.warning):
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    return 0


def cmd_export_family(args: argparse.Namespace) -> int:
    from nas import api
    if args.out is not None:
        raise ConfigError("--out: a family's members are exported to runs/NAME/export/<arch_id>, as one export each; "
                          "leave --out out with --family")
    is_run, is_config = api.names_a_run(args.run, args.runs_dir), _names_a_config(args.run)
    if is_run and is_config:
        run_dir = Path(args.run) if Path(args.run).is_dir() else Path(args.runs_dir) / args.run
        raise ConfigError(f"RUN: {args.run} names both the run {run_dir} and the shipped config {args.run}; say "
                          f"which: nas export {run_dir} --family {args.family} (the run: each member fine-tuned "
                          f"from its supernet) or nas export {Path(args.run).stem}.yaml --family {args.family} (the "
                          "config: each member trained alone from scratch)")
    if is_run or not is_config:
        run = api.load_run(args.run, args.runs_dir, args.checkpoint, args.device)
        result = api.export_family(run, args.family, _finetune_settings(args, run), args.format)
    else:      # a config: each member trained alone from scratch with its recipe
        given = [flag for flag, value in (("--finetune", args.finetune), ("--finetune-lr", args.finetune_lr),
                                          ("--distill", args.distill)) if value is not None]
        if given:
            raise ConfigError(f"{given[0]}: the members of a config's family are trained alone from scratch with the "
                              "config's recipe; fine-tune options apply to a trained run")
        if args.checkpoint != "last.pt":     # the default: given otherwise, it is a run's
            raise ConfigError(f"--checkpoint: {args.run} is a config, which has no checkpoint (its family's members "
                              "are trained alone from scratch); --checkpoint applies to a trained run")
        result = api.export_family_from_scratch(api.load_config(args.run), args.family, args.format, args.device)
    if args.json:
        _print_json(result.to_json())
    else:
        for member in result.members:
            print(f"member {member['index']}: {member['arch_id']} ({member['shipped']}) in {member['export_dir']}: "
                  f"val top-1 {member['val_top1']:.4f}, test top-1 {member['test_top1']:.4f}")
        print(f"family export written to {Path(args.family) / api.FAMILY_EXPORT}; see it with: nas summary {args.family}")
    if result.run is not None:
        _cheaper_path(result.run)
    return 0


def _cheaper_path_of(config_file: Path) -> str | None:
    """`cheaper_path_note` of a run's saved config (no weights loaded)."""
    from nas import api
    return api.cheaper_path_note(api.load_config(config_file), config_file)


def _cheaper_path(run_dir: Any) -> None:
    """Say on stderr when the run's supernet does not pay for itself, and the cheaper path."""
    note = _cheaper_path_of(Path(run_dir) / "config.yaml")
    if note:
        print(f"note: {note}", file=sys.stderr)


def _finetune_settings(args: argparse.Namespace, run: Any) -> Any:
    """The run's `export.finetune` with the command line's `--finetune*` options applied (None
    without any: the run's own, which errors then name as such)."""
    import dataclasses

    from nas.core.config import finetune_length_problem
    if args.finetune is None and args.finetune_lr is None and args.distill is None:
        return None
    settings = run.config.export.finetune
    if args.finetune is not None:
        problem = finetune_length_problem(args.finetune)
        if problem:
            raise ConfigError(f"--finetune: {problem}")
        settings = dataclasses.replace(settings, length=args.finetune)
    if args.finetune_lr is not None:
        if not args.finetune_lr > 0:
            raise ConfigError(f"--finetune-lr: must be > 0, got {args.finetune_lr}")
        settings = dataclasses.replace(settings, lr=args.finetune_lr)
    if args.distill is not None:
        settings = dataclasses.replace(settings, distill=args.distill)
    if not settings.enabled:
        given = [flag for flag, value in (("--finetune-lr", args.finetune_lr), ("--distill", args.distill or None))
                 if value is not None]
        if given:
            zero = "--finetune 0" if args.finetune is not None else "the run's export.finetune.length 0"
            raise ConfigError(f"{given[0]}: applies to a fine-tune, and {zero} ships the inherited weights; give "
                              f"--finetune LENGTH to fine-tune, or leave {' and '.join(given)} out")
    return settings


def _options(items: list[str]) -> dict[str, Any]:
    from nas.core import yaml_io
    from nas.core.errors import ConfigError
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--option {item}: expected KEY=VALUE, e.g. population=20")
        options[key] = yaml_io.parse_scalar(value, f"--option {key}")
    return options


def cmd_search(args: argparse.Namespace) -> int:
    from nas import api
    from nas.core.search_config import KEYS
    given = {key: getattr(args, key) for key in KEYS}     # None: the config's search section's, else the default
    if api.names_a_run(args.run, args.runs_dir) or not _names_a_config(args.run):
        if args.set:
            raise ConfigError("--set: overrides apply to a config, not to a trained run")
        run = api.load_run(args.run, args.runs_dir, args.checkpoint, args.device)
        settings = run.config.search.settings(run.config.source, **given)
    else:      # a config: its untrained supernet, for scores that read no trained weight
        config = api.load_config(args.run, args.set)
        settings = config.search.settings(config.source, **given)
        with settings.blamed():
            api.check_untrained_search(settings.values["score"], args.out, args.workers, settings.values["finalists"])
        run = api.untrained_run(config, args.out, args.device)
    if settings.family_key is not None:
        return _search_family(args, run)
    result = api.search(
        run, args.searcher,
        max_macs=args.max_macs, max_params=args.max_params, max_latency_ms=_milliseconds(args.max_latency_ms),
        batch=args.batch, trials=args.trials,
        seed=args.seed, storage=args.storage, study=args.study, out=args.out,
        options=_options(args.option) or None, worker=args.worker, workers=args.workers,
        progress=not args.quiet, score=args.score, finalists=args.finalists, finalist_steps=args.finalist_steps,
        latency_table=args.latency_table, predict_missing=args.predict_missing, ships=args.ships)
    for note in result.notes:
        print(f"note: {render(note, args.words)}", file=sys.stderr)
    if args.json:
        _print_json(result.to_json())
    else:
        print(f"best {_named(run.space, result.arch_id, result.best)}: {_scored(result)}, MACs "
              f"{format_amount(result.macs)}, params {format_amount(result.params)} ({result.evaluated} archs "
              f"evaluated, {result.new} new" + (f"; optimised for {result.optimised_for})" if result.optimised_for
                                                else ")"))
        if result.finalists is not None:
            print(next(line for line in api.format_search_summary(api.search_summary(result.dir)).splitlines()
                       if line.startswith("then finalists")))
        if run.step or run.checkpoint.is_file():      # an untrained config has no run to export from
            print(f"export it with: nas export {run.dir.root} --arch {result.dir / 'best.yaml'}"
                  + _finetune_flag(args.ships, run.config.export.finetune.enabled))
            _cheaper_path(run.dir.root)
    return 0


def _finetune_flag(ships: str | None, config_finetunes: bool) -> str:
    """What the printed export command adds so that it ships what `--ships` said the search optimised."""
    if ships == "inherited" and config_finetunes:
        return " --finetune 0"
    if ships == "finetuned" and not config_finetunes:
        return " --finetune LENGTH"
    return ""


def _milliseconds(text: str | None) -> float | None:
    """One `--max-latency-ms` budget as a number (a list is a family's: `nas.api.search_family`)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"--max-latency-ms: cannot read {text!r}; give milliseconds, e.g. 1.5, or a list "
                          "such as 1.2,1.5") from None


def _scored(result: Any) -> str:
    """`val top-1 0.9012` or `naswot 1234.5 (val top-1 0.9012)`: an answer's score."""
    if result.score == SUPERNET_SCORE:
        return f"val top-1 {result.val_top1:.4f}"
    return (f"{result.score} {result.score_value:.6g}"
            + (f" (val top-1 {result.val_top1:.4f})" if result.val_top1 is not None else ""))


def _search_family(args: argparse.Namespace, run: Any) -> int:
    """`nas search` with a budget list or `--members`: one member a line, then the family's line."""
    from nas import api
    if args.worker:
        raise ConfigError("--worker: a family searches its members one after another in this process; use "
                          "--workers N to share each member's Optuna study between N processes")
    family = api.search_family(
        run, args.searcher, max_macs=args.max_macs, max_params=args.max_params, max_latency_ms=args.max_latency_ms,
        members=args.members, batch=args.batch, trials=args.trials, seed=args.seed, storage=args.storage,
        study=args.study, out=args.out, options=_options(args.option) or None, workers=args.workers,
        progress=not args.quiet, score=args.score, finalists=args.finalists, finalist_steps=args.finalist_steps,
        latency_table=args.latency_table, predict_missing=args.predict_missing, ships=args.ships)
    for member in family.members:
        for note in member.notes:
            print(f"note: {member.dir.name}: {render(note, args.words)}", file=sys.stderr)
    if args.json:
        _print_json(family.to_json())
        return 0
    cost = family.cost
    for k, member in enumerate(family.members):
        budget = family.budgets[k] if cost == "latency_ms" else format_amount(family.budgets[k])
        latency = f", latency {member.latency_ms:.3g} ms" if member.latency_ms is not None else ""
        print(f"{member.dir.name}: {cost} budget {budget} ({family.budget_specs[k]}): "
              f"{_named(run.space, member.arch_id, member.best)}, MACs {format_amount(member.macs)}, params "
              f"{format_amount(member.params)}{latency}, {_scored(member)}")
    trained = run.step or run.checkpoint.is_file()
    export = (f"; export it with: nas export {run.dir.root} --family {family.dir}"
              + _finetune_flag(args.ships, run.config.export.finetune.enabled))
    print(f"family of {len(family.members)} in {family.dir}: {family.evaluations} distinct archs evaluated "
          f"({family.new} now)" + (export if trained else ""))
    if trained:
        _cheaper_path(run.dir.root)
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    from nas import api
    if api.is_family(args.search_dir):
        summary = api.summarise_family(args.search_dir)
        print(json.dumps(summary, indent=2) if args.json else api.format_family_summary(summary))
        return 0
    api.check_family_json_kept(args.search_dir)
    summary = api.search_summary(args.search_dir)
    shipped, stale = api.shipped_status(args.search_dir, summary["arch_id"])
    if args.json:
        _print_json({**{key: value for key, value in summary.items() if key != "trials"}, "shipped": shipped,
                     "shipped_stale": stale})
    else:
        print(api.format_search_summary(summary))
        export = f"nas export RUN --arch {Path(args.search_dir) / 'best.yaml'}"
        print("\n".join(api.format_shipped(shipped)) if shipped else
              f"not exported now: {stale}; export it: {export}" if stale else f"not exported yet: {export}")
    return 0


def cmd_fidelity(args: argparse.Namespace) -> int:
    from nas import api
    result = api.fidelity(args.run, archs=args.archs, epochs=args.epochs, seeds=args.seeds, recipe=args.recipe,
                          workers=args.workers, ground_truth_dir=args.ground_truth, out=args.out,
                          runs_dir=args.runs_dir, checkpoint=args.checkpoint, device=args.device,
                          progress=not args.quiet, estimators=args.estimators, init_seeds=args.init_seeds,
                          extends=args.extends)
    if args.json:
        _print_json(result.summary)
    else:
        print(f"{api.format_fidelity_summary(result.summary)}\nfiles in {result.dir} ({result.new} standalone trainings now)")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from nas import api
    run = api.load_run(args.run, args.runs_dir, args.checkpoint, args.device)
    result = api.generate(run, args.max_macs, args.seed, args.out)
    if args.json:
        _print_json(result.to_json())
    else:
        how = "shrunk to fit" if result.shrunk else f"attempt {result.attempts}"
        print(f"{result.arch_id}: MACs {format_amount(result.macs)} <= {format_amount(result.max_macs)} "
              f"({how}), params {format_amount(result.params)}, written to {result.file}")
    return 0


def cmd_latency_table(args: argparse.Namespace) -> int:
    from nas import api
    run = api.load_run(args.run, args.runs_dir, args.checkpoint, args.device)
    path = api.latency_table(run, run.device, args.batch, args.threads, progress=not args.quiet)
    if args.json:
        table = json.loads(path.read_text())
        _print_json({"path": str(path), "device": table["device"], "entries": len(table["entries"]),
                     "constant_ms": table.get("constant_ms")})
    else:
        print(path)
    return 0


def cmd_latency_fit(args: argparse.Namespace) -> int:
    from nas import api
    path, report = api.latency_fit(args.target, args.timings, args.column, tuple(args.prior), args.name, args.batch,
                                   args.out, tuple(args.set), args.runs_dir)
    if args.json:
        _print_json({"path": str(path), **report.to_json()})
    else:
        rho = "n/a" if report.heldout_spearman is None else f"{report.heldout_spearman:.3f}"
        timed = f"{report.timings} timings of {report.archs} archs" if report.archs < report.timings \
            else f"{report.archs} timed archs"
        rough = f" (rough: fewer than {report.RELIABLE} archs)" if report.rough else ""
        print(f"{path}: fitted from {timed} ({report.free_costs} free costs, {report.how}); held out over "
              f"{report.archs} archs{rough}: Spearman {rho}, MAPE {report.heldout_mape_pct:.1f}%")
    return 0


def cmd_latency_probe(args: argparse.Namespace) -> int:
    from nas import api
    bar = None

    def report(done: int, total: int) -> None:      # the bar starts once the arguments are checked
        nonlocal bar
        if args.quiet:
            return
        if bar is None:
            from tqdm import tqdm
            bar = tqdm(desc="latency probe", unit="subnet", total=total, file=sys.stderr)
        bar.n = done
        bar.refresh()

    try:
        result = api.latency_probe(args.target, args.count, args.out, args.resolution, args.seed, tuple(args.set),
                                   args.runs_dir, report)
    finally:
        if bar is not None:
            bar.close()
    for note in result.notes:
        print(f"note: {render(note, args.words)}", file=sys.stderr)
    if args.json:
        _print_json(result.to_json())
        return 0
    at = f" at resolution {result.resolution}" if result.resolution is not None else ""
    print(f"{len(result.archs)} subnets{at} in {result.dir} ({result.written} written now); their design has rank "
          f"{result.rank} of the {result.pool_rank} this space allows ({result.free_costs} free costs)")
    print(f"time each <arch_id>.onnx on the device, write its milliseconds into the latency_ms column of "
          f"{result.timings}, then: nas latency-fit {shlex.quote(args.target)} {shlex.quote(str(result.timings))} "
          f"--name DEVICE")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from nas import api
    result = api.import_run(args.format, args.file, args.name, tuple(args.set), args.runs_dir)
    if args.json:
        _print_json(result.to_json())
    else:
        r = result.record
        width = f" w{r['width']}" if "width" in r else ""
        print(f"run: {result.run} ({result.format}{width} as {result.config}, {r['num_classes']} classes; "
              f"BN statistics as in the file until recalibrated on data.root)")
        if r.get("note"):
            print(f"note: {r['note']}")
    return 0


def _registered() -> str:
    from nas.core.registry import (
        DISTILL_LOSSES,
        ESTIMATORS,
        SAMPLERS,
        SEARCHERS,
        SPACES,
        STRATEGIES,
    )
    rows = [("spaces", SPACES), ("strategies", STRATEGIES), ("samplers", SAMPLERS),
            ("distillation", DISTILL_LOSSES), ("searchers", SEARCHERS), ("estimators", ESTIMATORS)]
    return "registered:\n" + "\n".join(f"  {name:13s} {', '.join(reg.names())}" for name, reg in rows)


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="shipped config name (e.g. fashion_mnist_mbv3) or YAML path")
    parser.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="override config keys, e.g. --set train.epochs=3")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    from nas.api import EXPORT_FORMATS, SPLITS
    from nas.core.registry import SEARCHERS
    from nas.core.search_config import DEFAULTS as SEARCH_DEFAULTS

    parser = _Parser(
        prog="nas", description="Weight-sharing neural architecture search: train one supernet, "
        "search it under a budget, export the subnet.",
        epilog=_registered(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"nas {_version()}",
                        help="print the installed version of nas and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    space = commands.add_parser("space", help="size and min/max costs of a config's space; of a run: its "
                                "sub-supernets too")
    _add_config_args(space)
    space.add_argument("--json", action="store_true", help="print JSON on stdout")
    space.add_argument("--supernet-pays", action="store_true",
                       help="instead of the summary: exit 0 where a supernet pays for a family of this config, 1 "
                            "where training each member alone is cheaper (its exports fine-tune for a whole "
                            "training), with one line saying why and the cheaper commands")
    _add_runs_dir(space)
    space.set_defaults(func=cmd_space)

    train = commands.add_parser("train", help="train a supernet from a config")
    _add_config_args(train)
    train.add_argument("--name", help="run name (default: the config's file name)")
    train.add_argument("--resume", action="store_true", help="continue runs/NAME from its last checkpoint")
    train.add_argument("--checkpoint", default="last.pt",
                       help="with --resume: the checkpoint of runs/NAME/checkpoints to continue from (default last.pt)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument("--json", action="store_true",
                       help="print the final summary as JSON on stdout (run, step, epoch, val_top1 per monitored arch)")
    _add_device(train)
    _add_runs_dir(train)
    train.set_defaults(func=cmd_train)

    evaluate = commands.add_parser("eval", help="BN-recalibrated accuracy of a subnet of a trained run")
    _add_run_args(evaluate)
    evaluate.add_argument("--split", default="val", choices=SPLITS, help="split to score (default val)")
    evaluate.set_defaults(func=cmd_eval)

    export = commands.add_parser("export", help="export a subnet as a standalone model, or every member of a family")
    _add_run_args(export, arch=False)
    what = export.add_mutually_exclusive_group(required=True)
    what.add_argument("--arch", help=_arch_help())
    what.add_argument("--family", metavar="FAMILY_DIR",
                      help="a family search folder: export every member (each as --arch MEMBER/best.yaml would, "
                      "resumably member by member), then write FAMILY_DIR/family_export.json; with a config in "
                      "place of RUN, train each member alone from scratch with the config's recipe instead (into "
                      "FAMILY_DIR/export/<arch_id>)")
    export.add_argument("--out", help="output directory (default runs/NAME/export/<arch_id>)")
    export.add_argument("--format", default="pt2", choices=EXPORT_FORMATS,
                        help="pt2 (default): model.pt2 and weights; onnx: model.onnx too "
                        "(needs the onnx extra: pip install -e '.[onnx]')")
    export.add_argument("--finetune", metavar="LENGTH",
                        help="train the subnet alone from its inherited weights before saving it, resumably: N steps, "
                        "Ne epochs or P%% of the run's training steps; 0 ships the inherited weights, exactly the subnet "
                        "inside the supernet (default: the run's export.finetune.length; 0 unless its config sets it)")
    export.add_argument("--finetune-lr", type=float, metavar="LR",
                        help="the fine-tune's peak learning rate, cosine to 0 (default: export.finetune.lr, else the run's own)")
    export.add_argument("--distill", action=argparse.BooleanOptionalAction, default=None,
                        help="the fine-tune also learns from the max subnet's predictions (default: export.finetune.distill)")
    export.set_defaults(func=cmd_export)

    search = commands.add_parser("search", help="search a trained supernet for the best subnet under a budget",
                                 description="Search a trained supernet (or a config's untrained one) for the best "
                                 "subnet under a budget, or one per budget: a family. What a flag does not give comes "
                                 "from the run config's search: section (the same names: searcher, score, trials, "
                                 "seed, max_macs, max_params, max_latency_ms, members, finalists; docs/families.md), "
                                 "else the default; a budget flag (or --members) replaces all of its budgets.")
    search.add_argument("run", metavar="RUN", help="run directory or name under --runs-dir; or a config (shipped "
                        "name or YAML path) to search its untrained supernet by a table or zero-cost score "
                        "(needs --out)")
    search.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="with a config: override its keys, e.g. --set data.root=DIR")
    search.add_argument("--searcher", choices=SEARCHERS.names(),
                        help=f"registered searcher (default {SEARCH_DEFAULTS['searcher']})")
    search.add_argument("--score", metavar="NAME",
                        help="what ranks the candidates: a registered estimator (supernet: BN-recalibrated "
                        "validation top-1; macs, params, ...) or a fusion spec such as 2*supernet+naswot "
                        "(grammar: docs/estimators.md); auto (default): the best "
                        "within-bin Kendall tau of the run's latest nas fidelity, else the space's default chosen on "
                        "committed ground truth (said on stderr)")
    search.add_argument("--max-macs", help="MACs budget, e.g. 4M, or 50%% (halfway from the min to the max subnet); "
                        "a list such as 35%%,50%%,75%% searches a family, one subnet per budget, sharing evaluations")
    search.add_argument("--max-params", help="parameter budget, e.g. 150K, or a percentage like --max-macs (or a "
                        "list)")
    search.add_argument("--max-latency-ms", help="latency budget in ms on --device at --batch (or a list)")
    search.add_argument("--members", type=int, metavar="K",
                        help="search a family of K subnets, MACs budgets evenly spaced from 20%% to 80%% of the way "
                        "from the min to the max subnet (K=5: 20,35,50,65,80%%); --trials is per member")
    search.add_argument("--batch", type=int, default=1, help="latency batch size (default 1)")
    search.add_argument("--latency-table", metavar="PATH[:COLUMN]",
                        help="latency from this table instead of one measured here: a .json table (nas "
                        "latency-table or nas latency-fit), or a CSV of measured per-arch ms (column default latency_ms)")
    search.add_argument("--ships", choices=("finetuned", "inherited"),
                        help="what the export will ship, which --score auto optimises: inherited weights (auto is the "
                        "supernet's own measurement of them) or a fine-tuned subnet (auto predicts accuracy after "
                        "training); default: the run's export.finetune (inherited when its length is 0)")
    search.add_argument("--predict-missing", action="store_true",
                        help="with a CSV --latency-table: predict the archs it lacks from a table fitted to its rows "
                        "(default: an arch it lacks is an error)")
    search.add_argument("--trials", type=int, help="distinct archs to evaluate in total (default "
                        f"{SEARCH_DEFAULTS['trials']})")
    search.add_argument("--seed", type=int,
                        help=f"search seed (default {SEARCH_DEFAULTS['seed']}; worker k uses seed + k)")
    search.add_argument("--storage", help="Optuna storage URL (sqlite:///f.db, postgresql://..., journal:///f.log)")
    search.add_argument("--study", help="Optuna study name (also the search directory name)")
    search.add_argument("--workers", type=int, default=1,
                        help="start N local worker processes on one Optuna storage (1 thread each)")
    search.add_argument("--worker", type=int, default=0,
                        help="index of this process among the workers of a shared study (seed = --seed + index)")
    search.add_argument("--out", help="search directory (default runs/NAME/search/<study or searcher-budget-seed>)")
    search.add_argument("--option", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="searcher options, e.g. --option population=20 mutation_prob=0.3")
    search.add_argument("--checkpoint", default="last.pt", help="checkpoint file name (default last.pt)")
    search.add_argument("--finalists", type=int, metavar="K",
                        help="then fine-tune the K best by the score alone from the shared weights and answer the "
                        f"best of them on validation (default {SEARCH_DEFAULTS['finalists']}: none)")
    search.add_argument("--finalist-steps", type=int, metavar="N",
                        help="optimiser steps of each finalist's fine-tune (default 100)")
    search.add_argument("--json", action="store_true", help="print JSON on stdout")
    search.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_device(search, " (evaluation, and latency with --max-latency-ms)")
    _add_runs_dir(search)
    search.set_defaults(func=cmd_search)

    summary = commands.add_parser("summary", help="a finished search's answer: the chosen subnet, its costs against "
                                  "the budgets and how it was chosen; for a family folder, a table of its members "
                                  "and family.png")
    summary.add_argument("search_dir", metavar="SEARCH_DIR", help="the search folder (nas search --out, or "
                         "runs/NAME/search/<id>)")
    summary.add_argument("--json", action="store_true", help="print the summary as JSON on stdout (without the trials)")
    summary.set_defaults(func=cmd_summary)

    fidelity = commands.add_parser(
        "fidelity", help="how well the supernet ranks subnets: compare with N archs trained alone")
    fidelity.add_argument("run", metavar="RUN", help="run directory or name under --runs-dir")
    fidelity.add_argument("--archs", type=int, default=16,
                          help="archs to measure, stratified over the MACs range, min and max included (default 16)")
    fidelity.add_argument("--extends", metavar="M",
                          help="grow the M-arch selection to --archs: its M archs (and their cached trainings) "
                               "are kept, the others fill the MACs range where it is thinnest; M: the M-arch "
                               "selection the ground truth measured (the grown one when it was grown, see "
                               "its selections/ folder), or a lineage like 48-ext24 (48 grown from 24)")
    fidelity.add_argument("--epochs", type=int,
                          help="standalone training epochs (default: the recipe's, i.e. the run's own)")
    fidelity.add_argument("--seeds", type=int, default=1,
                          help="standalone trainings per arch; their mean is the ground truth (default 1)")
    fidelity.add_argument("--recipe", help="YAML file overriding keys of the run's train: and data: sections")
    fidelity.add_argument("--workers", type=int, default=1,
                          help="train that many archs at once, in processes of one thread each (default 1)")
    fidelity.add_argument("--ground-truth", metavar="DIR",
                          help="cache of standalone trainings, shared by runs on one space "
                               "(default runs/NAME/fidelity/ground_truth); or table:PATH.csv[:COLUMN], "
                               "accuracies measured elsewhere (e.g. NAS-Bench-201's), nothing trained")
    fidelity.add_argument("--estimators", metavar="A,B,...",
                          help="estimators to report beside the supernet (names or fusions like supernet+naswot; "
                               "default: supernet, every cheap one, the space's default score and its fusion with "
                               "supernet; calibrated only when named; supernet, macs and params always); see nas --help")
    fidelity.add_argument("--init-seeds", type=int, default=3,
                          help="initialisations zero-cost proxies average over (default 3)")
    fidelity.add_argument("--out", metavar="DIR", help="where the measurement's files go (default "
                                                        "runs/NAME/fidelity/<id>, <id> following from the options)")
    fidelity.add_argument("--checkpoint", default="last.pt", help="checkpoint file name (default last.pt)")
    fidelity.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    fidelity.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_device(fidelity, " (the supernet's evaluations; standalone training runs on the CPU)")
    _add_runs_dir(fidelity)
    fidelity.set_defaults(func=cmd_fidelity)

    generate = commands.add_parser("generate", help="an arch within a MACs budget from a shiftnas run's generator")
    _add_run_args(generate, arch=False)
    generate.add_argument("--max-macs", required=True, help="MACs budget, e.g. 4M, or 50%% (as nas search)")
    generate.add_argument("--seed", type=int, default=0, help="noise seed of the generator (default 0)")
    generate.add_argument("--out", help="arch file to write (default runs/NAME/generate/<arch_id>.yaml)")
    generate.set_defaults(func=cmd_generate)

    table = commands.add_parser("latency-table", help="measure a per-layer latency lookup table on a device")
    table.add_argument("run", metavar="RUN", help="run directory or name under --runs-dir")
    table.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    table.add_argument("--threads", type=int, help="CPU threads while measuring (default: torch's)")
    table.add_argument("--checkpoint", default="last.pt", help="checkpoint file name (default last.pt)")
    table.add_argument("--quiet", action="store_true", help="no progress bar")
    table.add_argument("--json", action="store_true",
                       help="print JSON on stdout (table path, device, number of entries, constant_ms)")
    _add_device(table)
    _add_runs_dir(table)
    table.set_defaults(func=cmd_latency_table)

    fit = commands.add_parser("latency-fit", help="fit a latency table to whole networks timed on a target device")
    fit.add_argument("target", metavar="CONFIG_OR_RUN", help="the space's config (name or YAML) or a run")
    fit.add_argument("timings", metavar="CSV", help="measured ms per arch: columns arch (id, JSON, arch file, or a "
                     "NAS-Bench-201 string in cell201 spaces) and --column")
    fit.add_argument("--column", default="latency_ms", help="the milliseconds column (default latency_ms)")
    fit.add_argument("--prior", nargs="+", action="extend", default=[], metavar="TABLE",
                     help="other devices' tables of the space (.json) or timings (CSV[:COLUMN]): fewer timings needed")
    fit.add_argument("--name", help="the target device's name in the table (default: the column's)")
    fit.add_argument("--batch", type=int, default=1, help="batch size the timings were made at (default 1)")
    fit.add_argument("--out", help="table file (.json; default RUN/latency/fit-<name>-b<batch>.json)")
    fit.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                     help="override config keys (with a config)")
    fit.add_argument("--json", action="store_true", help="print the path and the fit report as JSON on stdout")
    _add_runs_dir(fit)
    fit.set_defaults(func=cmd_latency_fit)

    probe = commands.add_parser("latency-probe", help="write N subnets to time on a target device, chosen so that "
                                "latency-fit tells the space's layer groups apart")
    probe.add_argument("target", metavar="CONFIG_OR_RUN", help="the space's config (name or YAML) or a run")
    probe.add_argument("count", metavar="N", type=int, help="how many subnets (latency-fit needs one more than the "
                       "space's free costs, which the output states, or 3 with prior tables)")
    probe.add_argument("--out", required=True, metavar="DIR",
                       help="folder for <arch_id>.onnx, <arch_id>.yaml and timings.csv (a rerun resumes it)")
    probe.add_argument("--resolution", type=int, help="the input resolution the device will run (default: the "
                       "space's largest)")
    probe.add_argument("--seed", type=int, default=0, help="seed of the pool the subnets are chosen from (default 0)")
    probe.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                       help="override config keys (with a config)")
    probe.add_argument("--quiet", action="store_true", help="no progress bar")
    probe.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    _add_runs_dir(probe)
    probe.set_defaults(func=cmd_latency_probe)

    imported = commands.add_parser("import", help="a run from another engine's published supernet (ofa: "
                                   "Once-for-All's MobileNetV3 w1.0/w1.2; alphanet: AlphaNet's), read by every verb "
                                   "like a trained run")
    imported.add_argument("format", metavar="FORMAT", help="the file's engine: ofa or alphanet")
    imported.add_argument("file", metavar="FILE", help="the published checkpoint (e.g. ofa_mbv3_d234_e346_k357_w1.0)")
    imported.add_argument("--name", required=True, help="the new run's name under --runs-dir")
    imported.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                          help="override keys of the format's config, as for nas train (e.g. data.root=DIR)")
    imported.add_argument("--json", action="store_true", help="print the run folder and the import record as JSON")
    _add_runs_dir(imported)
    imported.set_defaults(func=cmd_import)
    return parser


def _add_runs_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", default="runs", help="where runs live (default: runs)")


def _add_device(parser: argparse.ArgumentParser, what: str = "") -> None:
    parser.add_argument("--device", help=f"cpu, cuda or cuda:N{what} (default: cuda when available, else cpu)")


def _add_run_args(parser: argparse.ArgumentParser, arch: bool = True) -> None:
    parser.add_argument("run", metavar="RUN", help="run directory or name under --runs-dir")
    if arch:
        parser.add_argument("--arch", required=True, help=_arch_help())
    parser.add_argument("--checkpoint", default="last.pt", help="checkpoint file name (default last.pt)")
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")
    _add_device(parser)
    _add_runs_dir(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (errors are printed, not raised)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    func: Callable[[argparse.Namespace], int] = args.func
    args.words = FlagWords(parser, args.command)
    def one_line_warning(message, *_args, **_kwargs) -> None:
        print(f"nas {args.command}: warning: {message}", file=sys.stderr)

    try:
        with wording(args.words), warnings.catch_warnings():
            warnings.showwarning = one_line_warning
            return func(args)
    except NasError as e:
        lines = [render(line, args.words) for line in e.lines()]
        if len(lines) > MAX_ERROR_LINES:
            lines = lines[: MAX_ERROR_LINES - 1] + [f"... and {len(lines) - MAX_ERROR_LINES + 1} more problems"]
        for line in lines:
            print(f"nas {args.command}: {e.label}: {line}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"nas {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:      # `nas space ... | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        print(f"nas {args.command}: error: {_os_error_line(e)}", file=sys.stderr)
        return 1


def _os_error_line(error: OSError) -> str:
    """`PATH: reason` of an OSError (both paths of a failed rename)."""
    from nas.core.errors import clip_words

    reason = error.strerror if error.strerror else clip_words(str(error) or type(error).__name__)
    paths = [str(p) for p in (error.filename, error.filename2) if p is not None]
    return f"{' -> '.join(paths)}: {reason}" if paths else reason


def entry_point() -> None:
    """Console-script entry point."""
    sys.exit(main())
