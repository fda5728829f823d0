"""``gpucellpool run``'s flag checks, config sources and one-line errors, without a cluster.

The validators are pure functions from the flag's text; the parser tests go through the real
``build_parser`` (and ``main`` for the checks across flags), so a flag that loses its ``type=``
fails here. Config-source tests use temporary kubeconfig files and a fake environment.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucellpool import __version__
from gpucellpool.cli import build_parser, main
from gpucellpool.kube.access import in_cluster, load
from gpucellpool.kube.errors import KubeError
from gpucellpool.kube.kubeconfig import (
    KubeconfigError,
    check_files,
    document_problem,
    file_problem,
    find_source,
    merge,
)
from gpucellpool.operator import flag_types
from gpucellpool.operator.preflight import explain, lease_path, pool_paths
from gpucellpool.operator.run import settings_from
from gpucellpool.runtime.errors import UserError
from gpucellpool.runtime.leader import MIN_RETRY_S, ElectionSettings, LeaderElector

# -- validators ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"), [("2", 2.0), ("0.5", 0.5), ("1m30s", 90.0), ("150ms", 0.15), (" 3 ", 3.0)]
)
def test_positive_seconds_accepts_numbers_and_go_durations(text: str, seconds: float) -> None:
    assert flag_types.positive_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["0", "-5", "nan", "inf", "-inf", "1e400", "86401", "10x", ""])
def test_positive_seconds_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="want"):
        flag_types.positive_seconds(text)


def test_debounce_may_be_zero_but_not_negative_and_lease_needs_a_whole_second() -> None:
    assert flag_types.non_negative_seconds("0") == 0.0
    with pytest.raises(argparse.ArgumentTypeError):
        flag_types.non_negative_seconds("-1")
    assert flag_types.lease_seconds("1") == 1.0
    with pytest.raises(argparse.ArgumentTypeError, match="at least 1"):
        flag_types.lease_seconds("0.5")


@pytest.mark.parametrize(("text", "ok"), [("1", True), ("65535", True), ("8081", True),
                                          ("0", False), ("65536", False), ("99999", False),
                                          ("-1", False), ("http", False),
                                          ("80.5", False)])  # fmt: skip
def test_port(text: str, ok: bool) -> None:
    if ok:
        assert flag_types.port(text) == int(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="1-65535"):
            flag_types.port(text)


@pytest.mark.parametrize(("text", "ok"), [("team-a", True), ("a", True), ("a" * 63, True),
                                          ("a" * 64, False), ("Bad NS/..", False), ("Team", False),
                                          ("-a", False), ("a-", False), ("a.b", False), ("", False),
                                          ("$(POD_NAMESPACE)", False)])  # fmt: skip
def test_dns1123_label(text: str, ok: bool) -> None:
    if ok:
        assert flag_types.dns1123_label(text) == text
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="DNS-1123 label"):
            flag_types.dns1123_label(text)


@pytest.mark.parametrize(("text", "ok"), [("gpucellpool-autoscaler", True), ("a.b-c.d", True),
                                          ("a..b", False), ("bad_name", False), (".a", False),
                                          ("A", False), ("a" * 254, False)])  # fmt: skip
def test_dns1123_subdomain(text: str, ok: bool) -> None:
    if ok:
        assert flag_types.dns1123_subdomain(text) == text
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="DNS-1123 subdomain"):
            flag_types.dns1123_subdomain(text)


def test_namespace_list_splits_and_checks_every_part() -> None:
    assert flag_types.namespace_list("a, b,,c") == ["a", "b", "c"]
    assert flag_types.namespace_list(" , ") == []
    with pytest.raises(argparse.ArgumentTypeError, match="'B'"):
        flag_types.namespace_list("a,B")


def test_log_level_is_a_case_insensitive_choice() -> None:
    assert flag_types.log_level("debug") == "DEBUG"
    assert flag_types.log_level("Warning") == "WARNING"
    with pytest.raises(argparse.ArgumentTypeError, match="DEBUG, INFO"):
        flag_types.log_level("LOUD")


@pytest.mark.parametrize("text", ["", "  ", "a b", "a\tb", "a\x00"])
def test_non_empty_rejects_blank_and_spaced(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        flag_types.non_empty(text)


def test_directory_problem(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert flag_types.directory_problem(tmp_path) is None
    assert flag_types.directory_problem(tmp_path / "file") == "not a directory"
    assert flag_types.directory_problem(tmp_path / "nope") == "no such directory"


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "complaint"),
    [(15, 10, 2, None), (5, 6, 1, "--lease-duration"), (5, 5, 1, "--lease-duration"),
     (15, 2, 3, "--renew-deadline"), (15, 2, 2, "--renew-deadline")],
)  # fmt: skip
def test_election_problem(lease: float, renew: float, retry: float, complaint: str | None) -> None:
    problem = flag_types.election_problem(lease, renew, retry)
    assert (problem is None) == (complaint is None)
    if complaint is not None:
        assert problem is not None and problem.startswith(complaint)


# -- the parser and main ------------------------------------------------------------------------


@pytest.fixture
def root_logging() -> Iterator[None]:
    """``run`` installs its JSON handler on the root logger; put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser(list(argv)).parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--health-port", "99999"], "--health-port"),
        (["--metrics-port", "0"], "--metrics-port"),
        (["--log-level", "LOUD"], "--log-level"),
        (["--lease-duration", "-5"], "--lease-duration"),
        (["--tick", "nan"], "--tick"),
        (["--tick", "0"], "--tick"),
        (["--debounce", "-1"], "--debounce"),
        (["--retry-period", "0"], "--retry-period"),
        (["--renew-deadline", "inf"], "--renew-deadline"),
        (["--namespace", "Bad NS/.."], "--namespace"),
        (["--lease-namespace", "UPPER"], "--lease-namespace"),
        (["--lease-name", "bad_name"], "--lease-name"),
        (["--identity", ""], "--identity"),
    ],
)
def test_a_bad_flag_is_a_one_line_usage_error(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpucellpool run: error: argument " + flag)


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--lease-duration", "5", "--renew-deadline", "6"], "--lease-duration (5s) must be"),
        (["--renew-deadline", "2", "--retry-period", "3"], "--renew-deadline (2s) must be"),
        (["--metrics-cert-dir", "/nonexistent/certs"], "no such directory"),
    ],
)
def test_checks_across_flags_are_usage_errors_too(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and complaint in err


def test_environment_defaults_are_checked_like_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOG_LEVEL", "loud")
    with pytest.raises(SystemExit):
        parse("run")
    monkeypatch.setenv("LOG_LEVEL", "debug")
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    args = parse("run")
    assert (args.log_level, args.lease_namespace) == ("DEBUG", "ops")


def test_good_flags_reach_the_settings() -> None:
    args = parse("run", "--tick", "1m", "--retry-period", "500ms", "--namespace", "a,b",
                 "--namespace", "c", "--health-port", "9000", "--log-level", "warning")  # fmt: skip
    settings = settings_from(args)
    assert settings.tick_s == 60 and settings.retry_s == pytest.approx(0.5)
    assert settings.pool_namespaces == ("a", "b", "c") and settings.health_port == 9000
    assert args.log_level == "WARNING"


@pytest.mark.parametrize("argv", [["--version"], ["run", "--version"]])
def test_version(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"gpucellpool {__version__}\n"


def run_parser() -> argparse.ArgumentParser:
    parser = build_parser(["run"])
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run: argparse.ArgumentParser = sub.choices["run"]
    return run


def test_every_run_flag_has_help_showing_its_default() -> None:
    parser = run_parser()
    text = " ".join(parser.format_help().split())
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        assert action.help, action.option_strings
        if action.nargs != 0 and action.default not in (None, []):  # a switch is off by default
            assert f"(default: {action.default})" in text or "default" in action.help.lower(), (
                action.option_strings
            )
    assert "(default: 8081)" in text and "(default: gpucellpool-autoscaler)" in text


# -- config sources ------------------------------------------------------------------------------

GOOD = """
apiVersion: v1
kind: Config
current-context: a
contexts: [{name: a, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abc}}]
"""


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "no such file"),
        ("a: [1,\n", "not YAML"),
        ("- just\n- a list\n", "not a kubeconfig"),
        ("kind: Config\ncontexts: [{name: x}]\n", "no current-context (its contexts: x)"),
        ("current-context: y\ncontexts: [{name: x}]\n", "'y' is not among its contexts"),
        (b"\xff\xfe\x00binary", "not a text file"),
        (GOOD, None),
    ],
)
def test_file_problem(tmp_path: Path, content: str | bytes | None, problem: str | None) -> None:
    path = tmp_path / "config"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    found = file_problem(path)
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (("cluster: c, user", "cluster: other, user"), "names cluster 'other', which is not"),
        (('server: "https://127.0.0.1:6443", ', ""), "cluster 'c' has no server"),
        (("user: u}", "user: nobody}"), "names user 'nobody', which is not defined"),
    ],
)
def test_what_the_current_context_names_must_exist(
    tmp_path: Path, change: tuple[str, str], problem: str
) -> None:
    path = tmp_path / "config"
    path.write_text(GOOD.replace(*change))
    found = file_problem(path)
    assert found is not None and problem in found


def test_kubeconfig_files_merge_as_the_loader_merges_them(tmp_path: Path) -> None:
    """$KUBECONFIG=a:b with the context in one file and its cluster in the other is fine."""
    head, _, clusters = GOOD.partition("clusters:")
    (tmp_path / "a").write_text(head)
    (tmp_path / "b").write_text("clusters:" + clusters)
    assert file_problem(tmp_path / "a") == "context 'a' names cluster 'c', which is not defined"
    env = {"KUBECONFIG": f"{tmp_path / 'a'}:{tmp_path / 'b'}"}
    access, _ = load(None, env, tmp_path, tmp_path)
    assert access.server == "https://127.0.0.1:6443"
    assert merge([{"current-context": "x"}, {"current-context": "y"}])["current-context"] == "y"


def test_files_the_current_context_names_must_exist(tmp_path: Path) -> None:
    """Relative to the kubeconfig's own folder; entries of other contexts are not checked."""
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_text("ca")
    ca = GOOD.replace("insecure-skip-tls-verify: true", "certificate-authority: pki/ca.crt")
    path = tmp_path / "config"
    stale = "{token: abc}}, {name: stale, user: {tokenFile: /no}}]"
    path.write_text(ca.replace("{token: abc}}]", stale))
    assert file_problem(path) is None
    check_files("--kubeconfig", (path,))
    path.write_text(ca.replace("{token: abc}", "{client-certificate: u.crt, client-key: u.key}"))
    with pytest.raises(KubeconfigError, match=r"user 'u': client-certificate u.crt: no such file"):
        check_files("--kubeconfig", (path,))
    (tmp_path / "pki" / "ca.crt").unlink()
    path.write_text(ca)
    with pytest.raises(KubeconfigError, match=r"cluster 'c': certificate-authority pki/ca.crt"):
        check_files("--kubeconfig", (path,))


def test_preflight_paths_are_the_ones_the_operator_uses() -> None:
    from gpucellpool.operator.adapters import POOLS_PATH, LeaseClient  # noqa: PLC0415
    from gpucellpool.operator.provisioner_wiring import collection_path  # noqa: PLC0415
    from gpucellpool.operator.settings import Settings, watched_namespaces  # noqa: PLC0415

    for namespaces in ((), ("a",), ("a", "b", "a")):
        settings = Settings(identity="x", lease_namespace="ops", pool_namespaces=namespaces)
        expected = [collection_path(ns, POOLS_PATH) for ns in watched_namespaces(settings)]
        assert pool_paths(namespaces) == expected
    lease = LeaseClient(None, "ops", "gpucellpool-autoscaler")  # type: ignore[arg-type]
    assert lease_path("ops", "gpucellpool-autoscaler") == lease.path


def test_document_problem_of_a_directory_and_an_empty_file(tmp_path: Path) -> None:
    assert file_problem(tmp_path) == "is a directory, not a kubeconfig file"
    assert document_problem(None) is not None


POD = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def account_dir(tmp_path: Path, ca: bool = True) -> Path:
    """A service-account mount as the kubelet writes it (token, and the CA unless not ``ca``)."""
    path = tmp_path / "serviceaccount"
    path.mkdir(exist_ok=True)
    (path / "token").write_text("sa-token")
    if ca:
        (path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    return path


def test_nothing_found_names_every_source_and_why(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError) as caught:
        find_source(None, {}, tmp_path, account_dir(tmp_path))
    message = str(caught.value)
    for part in ("--kubeconfig: not given", "$KUBECONFIG: not set",
                 "in-cluster: KUBERNETES_SERVICE_HOST/PORT not set",
                 f"{tmp_path}/.kube/config: no such file"):  # fmt: skip
        assert part in message
    assert "\n" not in message


def test_in_cluster_without_its_ca_says_so(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match=r"in-cluster: .*/ca\.crt: no such file"):
        find_source(None, POD, tmp_path, account_dir(tmp_path, ca=False))


def test_order_kubeconfig_env_then_in_cluster_then_home(tmp_path: Path) -> None:
    home_config = tmp_path / ".kube" / "config"
    home_config.parent.mkdir()
    home_config.write_text(GOOD)
    env_config = tmp_path / "env.yaml"
    env_config.write_text(GOOD)
    sa = account_dir(tmp_path)
    with_env = {"KUBECONFIG": f"{tmp_path / 'absent'}:{env_config}", **POD}
    assert find_source(str(tmp_path / "x"), with_env, tmp_path, sa).paths == (tmp_path / "x",)
    assert find_source(None, with_env, tmp_path, sa).paths == (env_config,)
    absent_env = {"KUBECONFIG": str(tmp_path / "absent"), **POD}
    source = find_source(None, absent_env, tmp_path, sa)
    assert source.account_dir == sa
    assert in_cluster(absent_env, sa).server == "https://10.0.0.1:443"
    assert find_source(None, {"KUBECONFIG": str(tmp_path / "absent")}, tmp_path, sa).paths == (
        home_config,
    )


def test_a_broken_file_is_named_not_skipped(tmp_path: Path) -> None:
    home_config = tmp_path / ".kube" / "config"
    home_config.parent.mkdir()
    home_config.write_text(GOOD)
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        GOOD.replace("insecure-skip-tls-verify: true", "certificate-authority: /no/ca")
    )
    with pytest.raises(KubeconfigError, match=rf"^\$KUBECONFIG: {broken}: .*/no/ca"):
        load(None, {"KUBECONFIG": str(broken)}, tmp_path, tmp_path)
    access, described = load(None, {}, tmp_path, tmp_path)
    assert access.server == "https://127.0.0.1:6443" and str(home_config) in described


# -- runtime errors -----------------------------------------------------------------------------


def test_main_prints_a_user_error_as_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    root_logging: None,
) -> None:
    monkeypatch.delenv("GPUCELLPOOL_DEBUG", raising=False)
    missing = str(tmp_path / "missing")
    assert main(["run", "--kubeconfig", missing]) == 1
    assert (
        capsys.readouterr().err
        == f"gpucellpool run: error: --kubeconfig: {missing}: no such file\n"
    )
    with pytest.raises(KubeconfigError):
        main(["--debug", "run", "--kubeconfig", missing])
    monkeypatch.setenv("GPUCELLPOOL_DEBUG", "1")
    with pytest.raises(UserError):
        main(["run", "--kubeconfig", missing])


def api_error(status: int, body: str) -> KubeError:
    return KubeError(status, f"GET /apis/x: HTTP {status}: {body}")


def test_explain_uses_the_apiservers_message() -> None:
    body = '{"kind":"Status","message":"gpucellpools is forbidden: User \\"u\\" cannot list"}'
    assert explain(api_error(403, body), "GPUCellPools") == (
        'forbidden: gpucellpools is forbidden: User "u" cannot list '
        "(grant it with RBAC, e.g. the chart's roles)"
    )
    as_bytes = str(body.encode())  # how an older client rendered a bytes body
    assert explain(api_error(403, as_bytes), "x").startswith(
        'forbidden: gpucellpools is forbidden: User "u"'
    )
    cut = explain(api_error(403, body[: body.index(" cannot")]), "x")  # a message is cut at 300
    assert cut.startswith('forbidden: gpucellpools is forbidden: User "u" (grant it')
    assert "401" in explain(api_error(401, "Unauthorized"), "GPUCellPools")
    assert explain(api_error(500, "boom"), "the Lease") == "reading the Lease: HTTP 500: boom"
    door = api_error(403, 'gpucellpools is forbidden: User "u" cannot list')  # the door's form
    assert explain(door, "x") == (
        'forbidden: gpucellpools is forbidden: User "u" cannot list '
        "(grant it with RBAC, e.g. the chart's roles)"
    )


class CountingClock:
    def __init__(self) -> None:
        self.sleeps: list[float] = []

    def now(self) -> float:
        return 1000.0

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if len(self.sleeps) == 3:
            raise RuntimeError("enough rounds")


class NoLease:
    async def get(self) -> dict[str, Any] | None:
        raise ConnectionError("apiserver down")

    async def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("not reached")

    async def replace(self, lease: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("not reached")


async def test_elector_never_spins_even_with_a_zero_retry_period() -> None:
    clock = CountingClock()
    settings = ElectionSettings("ops", identity="a", retry_s=0.0)
    with pytest.raises(RuntimeError, match="enough rounds"):
        await LeaderElector(NoLease(), clock, settings).run()
    assert clock.sleeps == [MIN_RETRY_S] * 3 and MIN_RETRY_S > 0 and math.isfinite(MIN_RETRY_S)
