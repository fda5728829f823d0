"""`python -m simulations.harness up`: run the two test clusters by hand (demos, debugging).

Prints where the admin kubeconfigs are and keeps etcd, both apiservers and their
controller-managers running until Ctrl-C or SIGTERM, then stops them all.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from simulations.harness.cluster import Harness


def main(argv: Sequence[str] | None = None) -> int:
    """Start the harness, print its endpoints, wait for a signal, stop."""
    parser = argparse.ArgumentParser(prog="python -m simulations.harness")
    parser.add_argument("command", choices=["up"])
    parser.add_argument("--dir", type=Path, help="state directory (default: a new temp dir)")
    args = parser.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="gpucellpool-harness-"))
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with Harness.start(root) as harness:
        for endpoint in harness.endpoints:
            print(f"{endpoint.name:15} {endpoint.url}  KUBECONFIG={endpoint.kubeconfig_path}")
        print(f"started in {harness.timings['total']:.1f}s; state in {root}; Ctrl-C stops")
        sys.stdout.flush()
        done.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
