"""What one connection to an apiserver needs, read from a kubeconfig or a pod's service account.

Why this module exists: the operator reaches the infrastructure cluster (a kubeconfig file or
the pod's service account) and every workload cluster (a kubeconfig in a Secret). This module
reads those documents into one ``Access`` value: the server, how to trust it (CA, TLS server
name, insecure-skip-tls-verify), how to reach it (proxy-url) and who we are (client
certificate, bearer token or token file, exec credential plugin, basic auth). kubernetes_asyncio's
loaders did this before and brought its client package along (~61 MiB of API models per
process, issue 13); ``transport`` now turns an ``Access`` into a TLS session with aiohttp.

Every problem is a ``KubeconfigError`` naming the entry and the field
(``user 'u': client-key-data: not base64``), never the field's value. The operator speaks TLS
only: an ``http://`` server is refused. Fields this client would not honour
(``auth-provider``, impersonation) are refused rather than ignored, so a credential is never
silently different from what kubectl would send.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpucellpool.kube.kubeconfig import (
    SERVICE_ACCOUNT_DIR,
    KubeconfigError,
    find_source,
    load_files,
    named,
)

EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
IMPERSONATION = ("as", "as-uid", "as-groups", "as-user-extra")


@dataclass(frozen=True, slots=True)
class ExecPlugin:
    """An exec credential plugin (client-go's ExecConfig): run to get a token or certificate."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    api_version: str = EXEC_API_VERSIONS[0]
    cluster_info: Mapping[str, Any] | None = field(default=None, repr=False)
    """Given to the plugin in ``KUBERNETES_EXEC_INFO`` when it asks (provideClusterInfo)."""


@dataclass(frozen=True, slots=True)
class Access:
    """One apiserver and our credential for it; secrets never in ``repr``."""

    server: str
    ca_pem: str | None = field(default=None, repr=False)
    insecure: bool = False
    tls_server_name: str | None = None
    proxy: str | None = None
    client_cert_pem: bytes | None = field(default=None, repr=False)
    client_key_pem: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None
    basic: tuple[str, str] | None = field(default=None, repr=False)
    exec_plugin: ExecPlugin | None = None
    origin: str = "kubeconfig"
    """What the fields came from, for errors found later (a CA that is not a certificate)."""

    def with_client_cert(self, cert_pem: bytes, key_pem: bytes, origin: str) -> Access:
        """The same access with a client certificate from elsewhere (an exec plugin)."""
        return replace(self, client_cert_pem=cert_pem, client_key_pem=key_pem, origin=origin)


def tls_context(access: Access) -> ssl.SSLContext:
    """The TLS context that trusts the server as ``access`` says and presents its certificate.

    A key held only in memory is loaded through an anonymous in-memory file (``memfd``), so no
    private key is ever written to disk."""
    try:
        context = ssl.create_default_context(cadata=access.ca_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise KubeconfigError(
            f"{access.origin}: certificate-authority: not a PEM certificate"
        ) from exc
    if access.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if access.client_cert_pem is not None and access.client_key_pem is not None:
        try:
            _load_pair(context, access.client_cert_pem, access.client_key_pem)
        except (ssl.SSLError, ValueError) as exc:
            raise KubeconfigError(
                f"{access.origin}: client-certificate/client-key: not a PEM certificate and "
                "its private key"
            ) from exc
    return context


def _load_pair(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """``load_cert_chain`` from memory (it reads only files): an unnamed memfd on Linux, else
    (no memfd, no /proc) a private temporary file removed as soon as it is read."""
    pem = cert_pem.rstrip(b"\n") + b"\n" + key_pem
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("client-credential", os.MFD_CLOEXEC)
        try:
            os.write(fd, pem)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
            return
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)
    fd, name = tempfile.mkstemp(prefix="client-credential-")  # mode 0600
    try:
        os.write(fd, pem)
        os.close(fd)
        context.load_cert_chain(name)
    finally:
        os.unlink(name)


# -- kubeconfig documents -----------------------------------------------------------------------


def _text(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise KubeconfigError(f"{where}: {key}: want a string, not {type(value).__name__}")
    return value


def _file_or_data(
    entry: Mapping[str, Any], key: str, where: str, base: Path | None
) -> bytes | None:
    """``key-data`` (base64, preferred, as client-go) or the file ``key`` names."""
    data = _text(entry, f"{key}-data", where)
    if data is not None:
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise KubeconfigError(f"{where}: {key}-data: not base64") from exc
    name = _text(entry, key, where)
    if name is None:
        return None
    path = Path(name).expanduser()
    path = path if path.is_absolute() or base is None else base / path
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KubeconfigError(f"{where}: {key} {name}: {exc.strerror or 'unreadable'}") from exc


def _server(cluster: Mapping[str, Any], where: str) -> str:
    server = _text(cluster, "server", where)
    if server is None:
        raise KubeconfigError(f"{where}: server: missing")
    parts = urlsplit(server)
    if parts.scheme != "https" or not parts.hostname:
        raise KubeconfigError(
            f"{where}: server {server}: want an https:// URL (the operator speaks TLS only)"
        )
    return server.rstrip("/")


def _proxy(cluster: Mapping[str, Any], where: str) -> str | None:
    proxy = _text(cluster, "proxy-url", where)
    if proxy is not None and urlsplit(proxy).scheme not in ("http", "https"):
        raise KubeconfigError(f"{where}: proxy-url: want an http:// or https:// proxy")
    return proxy


def _cluster(cluster: Mapping[str, Any], where: str, base: Path | None) -> dict[str, Any]:
    """The ``Access`` fields of a kubeconfig cluster entry."""
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):
        raise KubeconfigError(f"{where}: insecure-skip-tls-verify: want true or false")
    ca = _file_or_data(cluster, "certificate-authority", where, base)
    try:
        ca_pem = None if ca is None else ca.decode("ascii")
    except UnicodeDecodeError as exc:
        raise KubeconfigError(f"{where}: certificate-authority: not a PEM certificate") from exc
    return {
        "server": _server(cluster, where),
        "ca_pem": ca_pem,
        "insecure": insecure,
        "tls_server_name": _text(cluster, "tls-server-name", where),
        "proxy": _proxy(cluster, where),
    }


def _cluster_info(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The cluster as an exec plugin is told it (client-go's ExecCredential ``spec.cluster``)."""
    ca = fields.get("ca_pem")
    info = {
        "server": fields["server"],
        "tlsServerName": fields.get("tls_server_name") or "",
        "insecureSkipTLSVerify": bool(fields.get("insecure")),
        "certificateAuthorityData": base64.b64encode(ca.encode()).decode() if ca else "",
        "proxyURL": fields.get("proxy") or "",
    }
    return {key: value for key, value in info.items() if value}


def _exec(spec: Any, where: str, cluster: Mapping[str, Any]) -> ExecPlugin:
    where = f"{where}: exec"
    if not isinstance(spec, dict):
        raise KubeconfigError(f"{where}: want a mapping with command and apiVersion")
    command = _text(spec, "command", where)
    if command is None:
        raise KubeconfigError(f"{where}: command: missing")
    version = _text(spec, "apiVersion", where)
    if version not in EXEC_API_VERSIONS:
        raise KubeconfigError(f"{where}: apiVersion: want one of {', '.join(EXEC_API_VERSIONS)}")
    args = spec.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise KubeconfigError(f"{where}: args: want a list of strings")
    env = spec.get("env") or []
    if not isinstance(env, list):
        raise KubeconfigError(f"{where}: env: want a list of {{name, value}}")
    pairs = [(e.get("name"), e.get("value")) for e in env if isinstance(e, dict)]
    named_pairs = [(n, v) for n, v in pairs if isinstance(n, str) and n and isinstance(v, str)]
    if len(named_pairs) != len(env):
        raise KubeconfigError(f"{where}: env: each entry wants a string name and value")
    info = _cluster_info(cluster) if spec.get("provideClusterInfo") is True else None
    return ExecPlugin(command, tuple(args), tuple(named_pairs), version, info)


def _user(
    user: Mapping[str, Any], where: str, base: Path | None, cluster: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``Access`` credential fields of a kubeconfig user entry (at most one method);
    ``cluster``: the cluster's ``Access`` fields (an exec plugin may be told them)."""
    if "auth-provider" in user:
        raise KubeconfigError(
            f"{where}: auth-provider: not supported; use an exec credential plugin instead"
        )
    for field_name in IMPERSONATION:
        if user.get(field_name):
            raise KubeconfigError(f"{where}: {field_name}: impersonation is not supported")
    cert = _file_or_data(user, "client-certificate", where, base)
    key = _file_or_data(user, "client-key", where, base)
    if (cert is None) != (key is None):
        missing = "client-key" if key is None else "client-certificate"
        raise KubeconfigError(f"{where}: {missing}: missing (a client certificate needs both)")
    token = _text(user, "token", where)
    token_file = _text(user, "tokenFile", where)
    username, password = _text(user, "username", where), _text(user, "password", where)
    if (username is None) != (password is None):
        raise KubeconfigError(f"{where}: username/password: give both or neither")
    methods = [
        name
        for name, present in (
            ("token", token is not None or token_file is not None),
            ("username/password", username is not None),
            ("exec", "exec" in user),
        )
        if present
    ]
    if len(methods) > 1:
        raise KubeconfigError(f"{where}: {' and '.join(methods)}: use one authentication method")
    path = None if token_file is None else Path(token_file).expanduser()
    return {
        "client_cert_pem": cert,
        "client_key_pem": key,
        "token": token,
        "token_file": path if path is None or path.is_absolute() or base is None else base / path,
        "basic": None if username is None else (username, password),
        "exec_plugin": _exec(user["exec"], where, cluster) if "exec" in user else None,
    }


def from_kubeconfig(
    doc: Mapping[str, Any], base: Path | None = None, label: str = "kubeconfig"
) -> Access:
    """The current context's ``Access``; relative file names are relative to ``base`` (the
    folder of the kubeconfig file; the working directory for a kubeconfig from a Secret)."""
    if not isinstance(doc, Mapping):
        raise KubeconfigError(f"{label}: not a kubeconfig (want a mapping)")
    current = doc.get("current-context")
    context = (named(dict(doc), "contexts").get(str(current)) or {}).get("context")
    if not current or not isinstance(context, dict):
        raise KubeconfigError(f"{label}: current-context: names no context")
    cluster_name = str(context.get("cluster") or "")
    cluster = (named(dict(doc), "clusters").get(cluster_name) or {}).get("cluster")
    if not isinstance(cluster, dict):
        raise KubeconfigError(
            f"{label}: context {current!r}: cluster {cluster_name!r}: not defined"
        )
    fields = _cluster(cluster, f"{label}: cluster {cluster_name!r}", base)
    user_name = context.get("user")
    if user_name:
        user = (named(dict(doc), "users").get(str(user_name)) or {}).get("user")
        if not isinstance(user, dict):
            raise KubeconfigError(f"{label}: context {current!r}: user {user_name!r}: not defined")
        fields |= _user(user, f"{label}: user {user_name!r}", base, fields)
    who = f", user {user_name!r}" if user_name else ""
    origin = f"{label}: context {current!r} (cluster {cluster_name!r}{who})"
    return Access(**fields, origin=origin)


def in_cluster(environ: Mapping[str, str], account_dir: Path) -> Access:
    """A pod's service account: the apiserver the kubelet names in the environment, its CA, and
    the token file (re-read as the kubelet rotates it)."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    label = "in-cluster service account"
    if not host or not port:
        raise KubeconfigError(f"{label}: KUBERNETES_SERVICE_HOST/PORT: not set")
    where = f"{label} {account_dir}"
    try:
        ca = (account_dir / "ca.crt").read_text(encoding="ascii")
        token = (account_dir / "token").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        name = getattr(exc, "filename", None) or "ca.crt"
        reason = getattr(exc, "strerror", None) or "unreadable"
        raise KubeconfigError(f"{where}: {Path(str(name)).name}: {reason}") from exc
    if not token:
        raise KubeconfigError(f"{where}: token: empty")
    bracketed = f"[{host}]" if ":" in host else host
    return Access(
        server=f"https://{bracketed}:{port}",
        ca_pem=ca,
        token_file=account_dir / "token",
        origin=where,
    )


def load(
    explicit: str | None,
    environ: Mapping[str, str],
    home: Path,
    account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> tuple[Access, str]:
    """The access of the first source that exists (``kubeconfig.find_source``'s order), and a
    description of the source for the log."""
    source = find_source(explicit, environ, home, account_dir)
    if source.account_dir is not None:
        return in_cluster(environ, source.account_dir), source.label
    joined = os.pathsep.join(str(path) for path in source.paths)
    doc = load_files(source.label, source.paths)
    return from_kubeconfig(doc, None, f"{source.label}: {joined}"), f"{source.label} {joined}"
