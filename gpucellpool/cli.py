"""The ``gpucellpool`` command line.

Each subcommand lives in the module that owns its concept and exposes two functions:
``add_arguments(parser)`` and ``run(args) -> int``. They are imported lazily so that
``gpucellpool crd`` does not pay for the simulator's imports and vice versa.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gpucellpool import __version__

VERSION_TEXT = f"gpucellpool {__version__}"

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "crd": ("gpucellpool.crdgen", "write (or --check) the generated CRD files"),
    "run": ("gpucellpool.run", "run the autoscaling operator (watch-driven, leader-elected)"),
    "simulate": ("simulations.cli", "replay a GPU demand trace through scaling policies"),
    "demo": (
        "simulations.demo.cli",
        "the real operator on the twin: replay a compressed trace, report, compare to simulate",
    ),
    "sweep": ("simulations.sweep", "sweep policy knobs; print the cost/wait Pareto front"),
    "trace": ("simulations.record", "record a trace from Prometheus (trace record ...)"),
}


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpucellpool", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = argv[0] if argv else None
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text)
        if name == wanted:
            module = importlib.import_module(module_name)
            module.add_arguments(sub_parser)
            sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    return int(args._run(args))


if __name__ == "__main__":
    raise SystemExit(main())
