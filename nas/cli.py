"""`nas` command line: one thin subcommand per `nas.api` function.

Bad input prints at most three one-line problems on stderr and exits 2; internal failures
exit 1 with a traceback; `--json` prints a machine-readable result on stdout.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from nas.costs import format_amount
from nas.errors import NasError

MAX_ERROR_LINES = 3


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def cmd_space(args: argparse.Namespace) -> int:
    from nas import api
    summary = api.space_summary(api.load_config(args.config, args.set))
    print(json.dumps(summary, indent=2) if args.json else api.format_space_summary(summary))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from nas import api
    from nas.run_dir import RunDir

    if args.resume:
        name = args.name if args.name is not None else api._default_name(api.load_config(args.config))
        run = RunDir(Path(args.runs_dir) / name)
        if not run.config.is_file():
            from nas.errors import RunError
            raise RunError(f"--resume: no run at {run.root} to resume (train it first without --resume)")
        config = api.resume_config(run, args.set)
    else:
        config, name = api.load_config(args.config, args.set), args.name
    run = api.train(config, name=name, resume=args.resume, runs_dir=args.runs_dir, progress=not args.quiet)
    print(f"run: {run.root}", file=sys.stderr)
    return 0


def _arch_help() -> str:
    return "max, min, or a YAML/JSON arch file (e.g. a search's best.yaml)"


def cmd_eval(args: argparse.Namespace) -> int:
    from nas import api
    run = api.load_run(args.run, args.runs_dir, args.checkpoint)
    result = api.evaluate(run, args.arch, args.split)
    if args.json:
        _print_json(result)
    else:
        print(f"{result['arch_id']}  {args.split} top-1 {result['top1']:.4f}  top-5 {result['top5']:.4f}  "
              f"({result['n_images']} images)  MACs {format_amount(result['macs'])}  "
              f"params {format_amount(result['params'])}  step {result['step']}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from nas import api
    run = api.load_run(args.run, args.runs_dir, args.checkpoint)
    record = api.export_subnet(run, args.arch, args.out)
    if args.json:
        _print_json(record)
    else:
        print(f"exported {record['arch_id']} to {record['dir']}: val top-1 {record['val_top1']:.4f}, "
              f"test top-1 {record['test_top1']:.4f}, MACs {format_amount(record['macs'])}, "
              f"params {format_amount(record['params'])}")
    return 0


def _registered() -> str:
    from nas.registry import DISTILL_LOSSES, SAMPLERS, SEARCHERS, SPACES, STRATEGIES
    rows = [("spaces", SPACES), ("strategies", STRATEGIES), ("samplers", SAMPLERS),
            ("distillation", DISTILL_LOSSES), ("searchers", SEARCHERS)]
    return "registered:\n" + "\n".join(f"  {name:13s} {', '.join(reg.names())}" for name, reg in rows)


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="shipped config name (e.g. fashion_mnist_mbv3) or YAML path")
    parser.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="override config keys, e.g. --set train.epochs=3")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="nas", description="Weight-sharing neural architecture search: train one supernet, "
        "search it under a budget, export the subnet.",
        epilog=_registered(), formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    space = commands.add_parser("space", help="size and min/max costs of a config's space")
    _add_config_args(space)
    space.add_argument("--json", action="store_true", help="print JSON on stdout")
    space.set_defaults(func=cmd_space)

    train = commands.add_parser("train", help="train a supernet from a config")
    _add_config_args(train)
    train.add_argument("--name", help="run name (default: the config's file name)")
    train.add_argument("--resume", action="store_true", help="continue runs/NAME from its last checkpoint")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_runs_dir(train)
    train.set_defaults(func=cmd_train)

    evaluate = commands.add_parser("eval", help="BN-recalibrated accuracy of a subnet of a trained run")
    _add_run_args(evaluate)
    evaluate.add_argument("--split", default="val", help="val (default) or test")
    evaluate.set_defaults(func=cmd_eval)

    export = commands.add_parser("export", help="export a subnet as a standalone model")
    _add_run_args(export)
    export.add_argument("--out", help="output directory (default runs/NAME/export/<arch_id>)")
    export.set_defaults(func=cmd_export)
    return parser


def _add_runs_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", default="runs", help="where runs live (default: runs)")


def _add_run_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="run directory or name under --runs-dir")
    parser.add_argument("--arch", required=True, help=_arch_help())
    parser.add_argument("--checkpoint", default="last.pt", help="checkpoint file name (default last.pt)")
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")
    _add_runs_dir(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (errors are printed, not raised)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except NasError as e:
        lines = e.lines()
        if len(lines) > MAX_ERROR_LINES:
            lines = lines[: MAX_ERROR_LINES - 1] + [f"... and {len(lines) - MAX_ERROR_LINES + 1} more problems"]
        for line in lines:
            print(f"nas {args.command}: error: {line}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"nas {args.command}: interrupted", file=sys.stderr)
        return 130


def entry_point() -> None:
    """Console-script entry point."""
    sys.exit(main())
