"""``gpucellpool run``: the autoscaling operator process.

Why this module exists: the CLI contract (``add_arguments`` / ``run``) for the long-running
process. It parses flags (with environment defaults suited to a Deployment: identity from the
pod name, Lease namespace from the pod namespace), configures JSON logging, finds the cluster
(``gpucellpool.kube.kubeconfig``) and looks at it once (``gpucellpool.operator.preflight``), builds
the graph in ``gpucellpool.operator.app`` and runs until SIGTERM/SIGINT, releasing the Lease on the
way out so the standby takes over at once. Each step imports only what it needs: ``--help``, a usage
error or a broken kubeconfig answers in about half a second of CPU; the graph (two seconds on a
busy machine) is imported once the cluster has answered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from gpucellpool import __version__
from gpucellpool.kube import kubeconfig
from gpucellpool.operator import flag_types, logs
from gpucellpool.runtime.errors import UserError
from gpucellpool.runtime.shards import lease_name
from webhook import rule_flags

if TYPE_CHECKING:
    from gpucellpool.kube.rest import RestClient
    from gpucellpool.operator.settings import Settings

API_TIMEOUT_S = 10.0
"""Every call to the infrastructure apiserver (``Settings.api_timeout_s``)."""


class _HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" unless the help already speaks of its default or X says nothing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        unsaid = action.nargs == 0 or action.default in (None, [], argparse.SUPPRESS)  # switches
        if "default" in text.lower() or unsaid:
            return text
        return super()._get_help_string(action)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.formatter_class = _HelpWithDefaults
    parser.usage = "%(prog)s [options]"  # the full list is --help's; an error stays short
    parser.add_argument("--version", action="version", version=f"gpucellpool {__version__}")
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig file of the infrastructure cluster (default: $KUBECONFIG, else "
        "in-cluster service account, else ~/.kube/config)",
    )
    parser.add_argument(
        "--identity",
        type=flag_types.non_empty,
        default=env("POD_NAME") or socket.gethostname(),
        help="this replica's name in the leader-election Lease ($POD_NAME, else the host name)",
    )
    parser.add_argument(
        "--lease-namespace",
        type=flag_types.dns1123_label,
        default=env("POD_NAMESPACE") or "default",
        help="namespace of the leader-election Lease ($POD_NAMESPACE, else the namespace "
        "named default)",
    )
    parser.add_argument(
        "--lease-name",
        type=flag_types.dns1123_subdomain,
        default="gpucellpool-autoscaler",
        help="name of the leader-election Lease",
    )
    _election_arguments(parser)
    _serving_arguments(parser)
    parser.add_argument(
        "--debounce",
        type=flag_types.non_negative_seconds,
        default=0.15,
        help="seconds (or a duration such as 150ms) of quiet after an event before deciding; "
        "0 decides at once",
    )
    parser.add_argument(
        "--tick",
        type=flag_types.positive_seconds,
        default=10.0,
        help="seconds (or a duration) between decisions when nothing happens",
    )
    parser.add_argument(
        "--namespace",
        type=flag_types.namespace_list,
        action="append",
        default=[],
        help="only pools in this namespace; repeat or comma-separate for several (default: all)",
    )
    parser.add_argument(
        "--serve-namespace",
        type=flag_types.namespace_list,
        action="append",
        default=[],
        help="pools are served (decided, provisioned) only in these watched namespaces, where "
        "the operator may read Secrets; others are ignored; repeat or comma-separate "
        "(default: every watched namespace)",
    )
    parser.add_argument(
        "--log-level",
        type=flag_types.log_level,
        default=env("LOG_LEVEL") or "INFO",
        help=f"one of {', '.join(flag_types.LOG_LEVELS)}, any case ($LOG_LEVEL, else INFO)",
    )
    parser.add_argument(
        "--no-provision",
        dest="provision",
        action="store_false",
        help="decide and publish only; another process reconciles cells",
    )
    rule_flags.add_arguments(parser)
    parser.set_defaults(_validate=lambda args: _validate(parser, args))


def _election_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lease-duration",
        type=flag_types.lease_seconds,
        default=15.0,
        help="seconds (or a duration) a standby waits on an unchanged Lease before taking over",
    )
    parser.add_argument(
        "--renew-deadline",
        type=flag_types.positive_seconds,
        default=10.0,
        help="seconds (or a duration) a leader that cannot renew keeps leading; "
        "less than --lease-duration",
    )
    parser.add_argument(
        "--retry-period",
        type=flag_types.positive_seconds,
        default=2.0,
        help="seconds (or a duration) between Lease reads and renewals; less than --renew-deadline",
    )
    parser.add_argument(
        "--shards",
        type=flag_types.whole_number(1),
        default=1,
        help="split the pools across this many processes by a stable hash of namespace/name; "
        "shard k is held through the Lease <lease-name>-shard-k (1: the one Lease as before)",
    )
    parser.add_argument(
        "--shard-index",
        type=flag_types.whole_number(0),
        default=0,
        help="this process's own shard, 0 .. --shards - 1; it stands by for the others and "
        "takes over a shard whose holder stopped renewing for a lease",
    )


def _serving_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--health-port",
        type=flag_types.port,
        default=8081,
        help="port of /healthz, /readyz and (unless --metrics-secure) /metrics",
    )
    parser.add_argument(
        "--health-host",
        type=flag_types.non_empty,
        default="0.0.0.0",
        help="address the probe (and metrics) ports listen on",
    )
    parser.add_argument(
        "--metrics-secure",
        action="store_true",
        help="serve /metrics over TLS on --metrics-port, only to bearer tokens the cluster "
        "authenticates (TokenReview) and authorises for get /metrics (SubjectAccessReview)",
    )
    parser.add_argument(
        "--metrics-port",
        type=flag_types.port,
        default=8443,
        help="port of the TLS /metrics endpoint (with --metrics-secure)",
    )
    parser.add_argument(
        "--metrics-cert-dir",
        type=Path,
        default=None,
        help="existing directory with tls.crt/tls.key for the metrics port (re-read on "
        "change); default: a self-signed certificate",
    )


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Checks across flags, after parsing, reported as argparse's usage error."""
    problem = flag_types.election_problem(
        args.lease_duration, args.renew_deadline, args.retry_period
    )
    if problem is None and args.shard_index >= args.shards:
        problem = f"--shard-index {args.shard_index} must be below --shards {args.shards}"
    if problem is None and args.metrics_cert_dir is not None:
        # Checked here, not by type=: in a pod it is a volume mount, absent where the chart's
        # rendered args are parsed in tests.
        problem = flag_types.directory_problem(args.metrics_cert_dir)
        problem = problem and f"--metrics-cert-dir {args.metrics_cert_dir}: {problem}"
    if problem is not None:
        parser.error(problem)


def settings_from(args: argparse.Namespace) -> Settings:
    # Imported here: the graph's modules cost a second; a usage error should not wait for them.
    from gpucellpool.operator.secure_metrics import MetricsOptions  # noqa: PLC0415
    from gpucellpool.operator.settings import Settings, webhook_options_from_env  # noqa: PLC0415

    return Settings(
        identity=args.identity,
        lease_namespace=args.lease_namespace,
        kubeconfig=args.kubeconfig,
        api_timeout_s=API_TIMEOUT_S,
        lease_name=args.lease_name,
        lease_s=args.lease_duration,
        renew_deadline_s=args.renew_deadline,
        retry_s=args.retry_period,
        health_host=args.health_host,
        health_port=args.health_port,
        debounce_s=args.debounce,
        tick_s=args.tick,
        pool_namespaces=tuple(ns for value in args.namespace for ns in value),
        served_namespaces=tuple(ns for value in args.serve_namespace for ns in value),
        provision=args.provision,
        rules=rule_flags.settings_from(args),
        shards=args.shards,
        shard_index=args.shard_index,
        webhook=webhook_options_from_env(os.environ),
        metrics=MetricsOptions(
            secure=args.metrics_secure,
            host=args.health_host,
            port=args.metrics_port,
            cert_dir=args.metrics_cert_dir,
        ),
    )


async def _checked_client(args: argparse.Namespace) -> RestClient:
    """The infrastructure cluster's client, once it answers as the operator needs."""
    from gpucellpool.kube.rest import client_in_cluster_or  # noqa: PLC0415
    from gpucellpool.operator import preflight  # noqa: PLC0415 - see settings_from

    infra = await client_in_cluster_or(args.kubeconfig, API_TIMEOUT_S)
    try:
        await preflight.check_cluster(
            infra,
            preflight.pool_paths([ns for value in args.namespace for ns in value]),
            preflight.lease_path(
                args.lease_namespace, lease_name(args.lease_name, args.shards, args.shard_index)
            ),
            infra.host,
        )
    except BaseException:
        await infra.close()
        raise
    return infra


async def serve(args: argparse.Namespace) -> None:
    """Check the cluster first (before the graph's imports), then run until a signal."""
    infra = await _checked_client(args)
    try:
        settings = settings_from(args)
    except ValueError as exc:  # the chart's GPUCELLPOOL_WEBHOOK_* environment
        await infra.close()
        raise UserError(str(exc)) from exc
    from gpucellpool.operator.app import App  # noqa: PLC0415 - see settings_from

    app = App(settings, infra)
    try:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        try:
            await app.start()
        except OSError as exc:  # a port in use, a host that is not ours
            ports = f"--health-host {settings.health_host} --health-port {settings.health_port}"
            if settings.metrics.secure:
                ports += f" --metrics-port {settings.metrics.port}"
            raise UserError(f"cannot serve on {ports}: {' '.join(str(exc).split())}") from exc
        await stop.wait()
    finally:
        await app.stop()


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level)
    kubeconfig.check_source(args.kubeconfig, os.environ, Path.home())  # before the heavy imports
    asyncio.run(serve(args))
    return 0
