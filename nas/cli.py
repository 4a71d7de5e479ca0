"""`nas` command line: one thin subcommand per `nas.api` function.

Bad input prints at most three one-line problems on stderr and exits 2; internal failures
exit 1 with a traceback; `--json` prints a machine-readable result on stdout.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Sequence

from nas.errors import NasError

MAX_ERROR_LINES = 3


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def cmd_space(args: argparse.Namespace) -> int:
    from nas import api
    summary = api.space_summary(api.load_config(args.config, args.set))
    print(json.dumps(summary, indent=2) if args.json else api.format_space_summary(summary))
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
    return parser


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
