"""Bad command lines, run as a newcomer runs them: the installed console script, a subprocess.

Every row of ``BAD_INPUTS`` must exit non-zero within ``TIMEOUT_S``, print at most ``MAX_LINES``
lines (stdout and stderr together), never a traceback, and name its problem
(``expect_in_output``). The environment is a newcomer's: ``HOME`` an empty directory, no
``$KUBECONFIG``, not in a pod. To cover another subcommand, append rows: ``{tmp}`` in an
argument or environment value is the row's own temporary directory, and ``files`` are written
there first (``str`` as UTF-8 text, ``bytes`` as they are).

The rows that need a real apiserver (CRD missing, RBAC forbidden, port in use) are in
``test_runtime_mistakes_against_real_apiservers``, with the same checks.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from simulations.harness import ClusterEndpoint
from tests.integration.test_metrics_secure import service_account_token

EXE = Path(sys.executable).with_name("gpucellpool")
TIMEOUT_S = 10.0
MAX_LINES = 3
CLEARED_ENV = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "LOG_LEVEL",
               "POD_NAME", "POD_NAMESPACE", "GPUCELLPOOL_DEBUG")  # fmt: skip


@dataclass(frozen=True)
class BadInput:
    """One bad command line and a fragment its output must contain."""

    args: tuple[str, ...]
    expect_in_output: str
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str | bytes] = field(default_factory=dict)

    @property
    def id(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.env.items())
        return " ".join([extra, *self.args]).strip() or "(no arguments)"


def kubeconfig(cluster: str, user: str = "{token: abc}", context: str = "a") -> str:
    return f"""apiVersion: v1
kind: Config
current-context: {context}
contexts: [{{name: a, context: {{cluster: c, user: u}}}}]
clusters: [{{name: c, cluster: {cluster}}}]
users: [{{name: u, user: {user}}}]
"""


UNREACHABLE = kubeconfig('{server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}')
MISSING_CA = kubeconfig('{server: "https://127.0.0.1:1", certificate-authority: /nope/ca.crt}')
MISSING_CERT = kubeconfig(
    '{server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}',
    user="{client-certificate: /nope/u.crt, client-key: /nope/u.key}",
)

RUN_FLAGS = [
    BadInput(("run", "--health-port", "99999"), "--health-port"),
    BadInput(("run", "--health-port", "0"), "--health-port"),
    BadInput(("run", "--health-port", "http"), "--health-port"),
    BadInput(("run", "--metrics-port", "70000"), "--metrics-port"),
    BadInput(("run", "--log-level", "LOUD"), "--log-level"),
    BadInput(("run", "--lease-duration", "-5"), "--lease-duration"),
    BadInput(("run", "--lease-duration", "0.5"), "--lease-duration"),
    BadInput(("run", "--tick", "0"), "--tick"),
    BadInput(("run", "--tick", "nan"), "--tick"),
    BadInput(("run", "--tick", "inf"), "--tick"),
    BadInput(("run", "--tick", "10x"), "--tick"),
    BadInput(("run", "--debounce", "-1"), "--debounce"),
    BadInput(("run", "--retry-period", "0"), "--retry-period"),
    BadInput(("run", "--renew-deadline", "1e400"), "--renew-deadline"),
    BadInput(("run", "--namespace", "Bad NS/.."), "--namespace"),
    BadInput(("run", "--namespace", "team-a,Team-B"), "'Team-B'"),
    BadInput(("run", "--lease-namespace", "UPPER"), "--lease-namespace"),
    BadInput(("run", "--lease-name", "bad_name"), "--lease-name"),
    BadInput(("run", "--identity", ""), "--identity"),
    BadInput(("run", "--lease-duration", "5", "--renew-deadline", "6"), "--lease-duration (5s)"),
    BadInput(("run", "--renew-deadline", "2", "--retry-period", "3"), "--renew-deadline (2s)"),
    BadInput(("run", "--metrics-cert-dir", "{tmp}/no-certs"), "no such directory"),
    BadInput(("run", "--no-such-flag"), "unrecognized arguments"),
    BadInput(("run",), "--log-level", env={"LOG_LEVEL": "loud"}),
    BadInput(("run",), "--lease-namespace", env={"POD_NAMESPACE": "Not_A_Namespace"}),
]
TOP_LEVEL = [
    BadInput((), "COMMAND"),
    BadInput(("no-such-command",), "invalid choice"),
    BadInput(("--no-such-flag",), "gpucellpool: error"),
]
CONFIG = [
    BadInput(("run",), "no cluster configuration found"),
    BadInput(("run", "--kubeconfig", "/nonexistent"), "--kubeconfig: /nonexistent: no such file"),
    BadInput(("run", "--kubeconfig", "{tmp}"), "is a directory"),
    BadInput(("run", "--kubeconfig", "{tmp}/k"), "not YAML", files={"k": "a: [1,\n"}),
    BadInput(("run", "--kubeconfig", "{tmp}/k"), "not a text file", files={"k": b"\xff\xfe\x00"}),
    BadInput(("run", "--kubeconfig", "{tmp}/k"), "not a kubeconfig", files={"k": "- a\n"}),
    BadInput(
        ("run", "--kubeconfig", "{tmp}/k"),
        "no current-context",
        files={"k": "kind: Config\ncontexts: [{name: x}]\n"},
    ),
    BadInput(
        ("run", "--kubeconfig", "{tmp}/k"),
        "'b' is not among",
        files={"k": kubeconfig("{}", "{}", "b")},
    ),
    BadInput(("run", "--kubeconfig", "{tmp}/k"), "/nope/ca.crt", files={"k": MISSING_CA}),
    BadInput(("run", "--kubeconfig", "{tmp}/k"), "/nope/u.crt", files={"k": MISSING_CERT}),
    BadInput(("run", "--kubeconfig", "{tmp}/k"), "has no server", files={"k": kubeconfig("{}")}),
    BadInput(("run", "--kubeconfig", "{tmp}/k"), "not a kubeconfig", files={"k": ""}),
    BadInput(
        ("run", "--kubeconfig", "{tmp}/k"),
        "names user 'u', which is not defined",
        files={"k": kubeconfig("{server: https://127.0.0.1:1}").partition("users:")[0]},
    ),
    BadInput(("run",), "$KUBECONFIG: ", env={"KUBECONFIG": "{tmp}/k"}, files={"k": "a: [\n"}),
    BadInput(
        ("run",), "$KUBECONFIG={tmp}/absent: no such file", env={"KUBECONFIG": "{tmp}/absent"}
    ),
    BadInput(("run",), "~/.kube/config", files={"home/.kube/config": "kind: Config\n"}),
    BadInput(
        ("run",),
        "in-cluster: KUBERNETES_SERVICE_HOST/PORT set but empty",
        env={"KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": "443"},
    ),
    BadInput(
        ("run", "--kubeconfig", "{tmp}/k"),
        "cannot reach the apiserver at https://127.0.0.1:1",
        files={"k": UNREACHABLE},
    ),
]
BAD_INPUTS: list[BadInput] = [*TOP_LEVEL, *RUN_FLAGS, *CONFIG]


def expand(text: str, tmp: Path) -> str:
    return text.replace("{tmp}", str(tmp))


def run_cli(args: tuple[str, ...], tmp: Path, env: Mapping[str, str] = {}) -> tuple[int, str]:
    """Exit code and combined output of the console script in a newcomer's environment."""
    assert EXE.exists(), f"the console script is not installed at {EXE} (pip install -e .)"
    (tmp / "home").mkdir(exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    environ |= {"HOME": str(tmp / "home")} | {k: expand(v, tmp) for k, v in env.items()}
    started = time.monotonic()
    done = subprocess.run(
        [str(EXE), *(expand(a, tmp) for a in args)],
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=TIMEOUT_S,  # TimeoutExpired fails the row
        check=False,
    )
    assert time.monotonic() - started < TIMEOUT_S
    return done.returncode, done.stdout.decode("utf-8", "replace")


def check(row: BadInput, tmp: Path) -> None:
    for name, content in row.files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    code, output = run_cli(row.args, tmp, row.env)
    lines = output.splitlines()
    assert code != 0, output
    assert "Traceback" not in output, output
    assert len(lines) <= MAX_LINES, output
    assert expand(row.expect_in_output, tmp) in output, output


def test_the_table_is_big_enough() -> None:
    assert len(BAD_INPUTS) >= 25 and len({r.id for r in BAD_INPUTS}) >= 25


@pytest.mark.parametrize("row", BAD_INPUTS, ids=lambda r: r.id)
def test_bad_input_is_one_clear_line(row: BadInput, tmp_path: Path) -> None:
    check(row, tmp_path)


@pytest.mark.parametrize("args", [("--version",), ("run", "--version")])
def test_version(args: tuple[str, ...], tmp_path: Path) -> None:
    from gpucellpool import __version__  # noqa: PLC0415 - the installed metadata, as the script

    assert run_cli(args, tmp_path) == (0, f"gpucellpool {__version__}\n")


@pytest.mark.parametrize("args", [("--help",), ("run", "--help")])
def test_help(args: tuple[str, ...], tmp_path: Path) -> None:
    code, output = run_cli(args, tmp_path)
    assert code == 0 and output.startswith("usage: gpucellpool")
    if "run" in args:
        assert "(default: 8081)" in " ".join(output.split())


# -- against real apiservers ---------------------------------------------------------------------


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def token_kubeconfig(endpoint: ClusterEndpoint, token: str) -> str:
    cluster = f'{{server: "{endpoint.url}", certificate-authority: "{endpoint.ca_path}"}}'
    return kubeconfig(cluster, user=f'{{token: "{token}"}}')


def test_runtime_mistakes_against_real_apiservers(
    infra: ClusterEndpoint,
    workload: ClusterEndpoint,
    namespace: str,
    tmp_path: Path,
    busy_port: int,
) -> None:
    token = service_account_token(infra, namespace, "nobody")
    local = ("--health-host", "127.0.0.1", "--lease-namespace", namespace)
    with_file = ("run", "--kubeconfig", "{tmp}/k", *local)
    rows = [
        # The workload cluster has no GPUCellPool CRD.
        BadInput(
            ("run", "--kubeconfig", str(workload.kubeconfig_path), *local), "CRD is not installed"
        ),
        # A ServiceAccount nobody granted anything; a token the apiserver does not know.
        BadInput(with_file, "forbidden: ", files={"k": token_kubeconfig(infra, token)}),
        BadInput(
            with_file,
            "refused the credentials (401)",
            files={"k": token_kubeconfig(infra, "not-a-token")},
        ),
        BadInput(
            ("run", "--kubeconfig", str(infra.kubeconfig_path), "--namespace", namespace,
             "--health-port", str(busy_port), *local),
            "address already in use",
        ),
        # The chart's webhook settings come from the environment, read once the cluster answers.
        BadInput(
            ("run", "--kubeconfig", str(infra.kubeconfig_path), *local),
            "GPUCELLPOOL_WEBHOOK_PORT",
            env={"GPUCELLPOOL_WEBHOOK_ENABLED": "true", "GPUCELLPOOL_WEBHOOK_PORT": "many"},
        ),
    ]  # fmt: skip
    for index, row in enumerate(rows):
        row_tmp = tmp_path / str(index)
        row_tmp.mkdir()
        check(row, row_tmp)
