"""The ``gpucellpool`` command line.

Each subcommand lives in the module that owns its concept and exposes two functions:
``add_arguments(parser)`` and ``run(args) -> int``. They are imported lazily so that
``gpucellpool crd`` does not pay for the simulator's imports and vice versa. A subcommand may
also set a ``_validate(args)`` default: checks across flags, run right after parsing, which
report through ``parser.error`` like any other usage error.

Bad input ends in one line, never a traceback: a usage error is ``PROG: error: ...`` (exit 2,
with a pointer to ``--help`` instead of the whole usage), and a ``UserError`` or ``OSError``
raised while running is ``gpucellpool COMMAND: error: ...`` (exit 1). ``--debug`` or
``GPUCELLPOOL_DEBUG=1`` lets the traceback through instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from gpucellpool import __version__
from gpucellpool.operator.logs import scrub
from gpucellpool.runtime.errors import UserError

VERSION_TEXT = f"gpucellpool {__version__}"
DEBUG_ENV = "GPUCELLPOOL_DEBUG"
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line pointing at ``--help``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "crd": ("gpucellpool.api.crdgen", "write (or --check) the generated CRD files"),
    "run": (
        "gpucellpool.operator.run",
        "run the autoscaling operator (watch-driven, leader-elected)",
    ),
    "simulate": ("simulations.simulator.cli", "replay a GPU demand trace through scaling policies"),
    "demo": (
        "simulations.demo.cli",
        "the real operator on the twin: replay a compressed trace, report, compare to simulate",
    ),
    "fidelity-diff": (
        "simulations.demo.divergence",
        "replay a twin run's fidelity dump: where the twin and the simulator part",
    ),
    "sweep": (
        "simulations.simulator.sweep",
        "sweep policy knobs; print the cost/wait Pareto front",
    ),
    "trace": ("simulations.simulator.record", "record a trace from Prometheus (trace record ...)"),
}


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="gpucellpool", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"show the traceback of a failure instead of one line (or set {DEBUG_ENV}=1)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = next((arg for arg in argv if not arg.startswith("-")), None)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text)
        if name == wanted:
            module = importlib.import_module(module_name)
            module.add_arguments(sub_parser)
            sub_parser.set_defaults(_run=module.run)
    return parser


def one_line(error: BaseException) -> str:
    """The error's message on one line, secrets masked; its type when it has no message."""
    return scrub(" ".join(str(error).split())) or type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    validate = getattr(args, "_validate", None)
    if validate is not None:
        validate(args)
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        return int(args._run(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (UserError, OSError) as exc:
        if debug:
            raise
        print(f"gpucellpool {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
