"""``gpucellpool run``: the autoscaling operator process.

Why this module exists: the CLI contract (``add_arguments`` / ``run``) for the long-running
process. It parses flags (with environment defaults suited to a Deployment: identity from the
pod name, Lease namespace from the pod namespace), configures JSON logging, builds the graph in
``gpucellpool.app`` and runs until SIGTERM/SIGINT, releasing the Lease on the way out so the
standby takes over at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
from pathlib import Path

from gpucellpool import __version__, logs
from gpucellpool.app import Settings, build, webhook_options_from_env
from gpucellpool.secure_metrics import MetricsOptions
from webhook import rule_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument("--version", action="version", version=f"gpucellpool {__version__}")
    parser.add_argument("--kubeconfig", default=env("KUBECONFIG"), help="default: in-cluster")
    parser.add_argument("--identity", default=env("POD_NAME") or socket.gethostname())
    parser.add_argument("--lease-namespace", default=env("POD_NAMESPACE") or "default")
    parser.add_argument("--lease-name", default="gpucellpool-autoscaler")
    parser.add_argument("--lease-duration", type=float, default=15.0, help="seconds")
    parser.add_argument("--renew-deadline", type=float, default=10.0, help="seconds")
    parser.add_argument("--retry-period", type=float, default=2.0, help="seconds")
    parser.add_argument("--health-port", type=int, default=8081)
    parser.add_argument("--health-host", default="0.0.0.0")
    parser.add_argument(
        "--metrics-secure",
        action="store_true",
        help="serve /metrics over TLS on --metrics-port, only to bearer tokens the cluster "
        "authenticates (TokenReview) and authorises for get /metrics (SubjectAccessReview)",
    )
    parser.add_argument("--metrics-port", type=int, default=8443)
    parser.add_argument(
        "--metrics-cert-dir",
        type=Path,
        default=None,
        help="tls.crt/tls.key for the metrics port (re-read on change); default: self-signed",
    )
    parser.add_argument("--debounce", type=float, default=0.15, help="seconds")
    parser.add_argument("--tick", type=float, default=10.0, help="seconds")
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="only pools in this namespace; repeat or comma-separate for several (default: all)",
    )
    parser.add_argument("--log-level", default=env("LOG_LEVEL") or "INFO")
    parser.add_argument(
        "--no-provision",
        dest="provision",
        action="store_false",
        help="decide and publish only; another process reconciles cells",
    )
    rule_flags.add_arguments(parser)


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings(
        identity=args.identity,
        lease_namespace=args.lease_namespace,
        kubeconfig=args.kubeconfig,
        lease_name=args.lease_name,
        lease_s=args.lease_duration,
        renew_deadline_s=args.renew_deadline,
        retry_s=args.retry_period,
        health_host=args.health_host,
        health_port=args.health_port,
        debounce_s=args.debounce,
        tick_s=args.tick,
        pool_namespaces=tuple(
            ns.strip() for value in args.namespace for ns in value.split(",") if ns.strip()
        ),
        provision=args.provision,
        rules=rule_flags.settings_from(args),
        webhook=webhook_options_from_env(os.environ),
        metrics=MetricsOptions(
            secure=args.metrics_secure,
            host=args.health_host,
            port=args.metrics_port,
            cert_dir=args.metrics_cert_dir,
        ),
    )


async def serve(settings: Settings) -> None:
    app = await build(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await app.start()
    try:
        await stop.wait()
    finally:
        await app.stop()


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level)
    asyncio.run(serve(settings_from(args)))
    return 0
