"""Where ``gpucellpool run`` finds its cluster credentials, and one line when it finds none.

Why this module exists: a credential problem must say which file or source was meant, not only
what a loader tripped on ("Service host/port is not set", a missing "current-context" key for a
file that does not exist). The operator tries, in controller-runtime's order: ``--kubeconfig``,
``$KUBECONFIG``, the in-cluster service account, ``~/.kube/config``. An explicit or found file
that is broken is an error naming the file and its problem (no silent fall-through to another
cluster); when no source exists the error names each one tried and why it did not apply.
``$KUBECONFIG`` comes before the in-cluster account so that a process started inside a pod
with ``$KUBECONFIG`` set (a CI runner) talks to the cluster it was pointed at. Finding the
source and checking its files (``check_source``) is cheap, so ``run`` does it before importing
the operator's graph: a newcomer's mistake is reported in a moment. ``access`` reads the
source's fields into what a connection needs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpucellpool.runtime.errors import UserError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where the kubelet mounts a pod's service-account token and the cluster's CA."""


class KubeconfigError(UserError):
    """No usable cluster configuration; the message names the source(s) and the problem."""


def named(doc: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """The ``kind`` entries (clusters, contexts, users) by name, the first of a name winning."""
    items = doc.get(kind)
    found: dict[str, dict[str, Any]] = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("name"):
            found.setdefault(str(item["name"]), item)
    return found


def merge(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several kubeconfig files merged: the first entry of a name wins, and the last file that
    sets ``current-context`` sets it (as kubernetes_asyncio merged them before)."""
    merged: dict[str, Any] = {}
    for kind in ("clusters", "contexts", "users"):
        entries: dict[str, dict[str, Any]] = {}
        for doc in docs:
            for name, item in named(doc, kind).items():
                entries.setdefault(name, item)
        merged[kind] = list(entries.values())
    for doc in docs:
        if "current-context" in doc:
            merged["current-context"] = doc["current-context"]
    return merged


def document_problem(doc: Any) -> str | None:
    """What makes a parsed kubeconfig unusable before any loader sees it, or None."""
    if not isinstance(doc, dict):
        return "not a kubeconfig (want a YAML mapping with clusters, contexts and users)"
    contexts = named(doc, "contexts")
    current = doc.get("current-context")
    names = ", ".join(contexts)
    listed = f" (its contexts: {names})" if contexts else " (it has no contexts)"
    if not current:
        return f"no current-context{listed}; set one: kubectl config use-context NAME"
    if str(current) not in contexts:
        return f"current-context {current!r} is not among its contexts{listed}"
    return _context_problem(doc, str(current), contexts[str(current)].get("context") or {})


def _context_problem(doc: dict[str, Any], current: str, context: dict[str, Any]) -> str | None:
    """What the current context names that the kubeconfig does not define, or None."""
    clusters = named(doc, "clusters")
    cluster = str(context.get("cluster") or "")
    if cluster not in clusters:
        return f"context {current!r} names cluster {cluster!r}, which is not defined"
    if not (clusters[cluster].get("cluster") or {}).get("server"):
        return f"cluster {cluster!r} has no server"
    user = context.get("user")
    if user and str(user) not in named(doc, "users"):
        return f"context {current!r} names user {user!r}, which is not defined"
    return None


def _read(path: Path) -> tuple[str, str | None]:
    """The file's text, or why it cannot be read."""
    try:
        return path.read_text(encoding="utf-8"), None
    except FileNotFoundError:
        return "", "no such file"
    except IsADirectoryError:
        return "", "is a directory, not a kubeconfig file"
    except PermissionError:
        return "", "permission denied"
    except UnicodeDecodeError:
        return "", "not a text file (not UTF-8)"
    except OSError as exc:
        return "", exc.strerror or type(exc).__name__


def parse_file(path: Path) -> tuple[dict[str, Any], str | None]:
    """The kubeconfig mapping in ``path``, or why the file is not one (read, YAML, shape)."""
    text, problem = _read(path)
    if problem is not None:
        return {}, problem
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return {}, f"not YAML ({getattr(exc, 'problem', None) or 'invalid'}{where})"
    if not isinstance(doc, dict):
        return {}, "not a kubeconfig (want a YAML mapping with clusters, contexts and users)"
    return doc, None


def file_problem(path: Path) -> str | None:
    """Why the one kubeconfig file at ``path`` cannot be used, or None."""
    doc, problem = parse_file(path)
    return problem if problem is not None else document_problem(doc)


def check_files(label: str, paths: tuple[Path, ...]) -> None:
    """Raise ``KubeconfigError`` naming the file and its problem unless the files (merged as
    the loader merges them) define a usable current context."""
    docs = []
    for path in paths:
        doc, problem = parse_file(path)
        if problem is not None:
            raise KubeconfigError(f"{label}: {path}: {problem}")
        docs.append(doc)
    joined = os.pathsep.join(str(p) for p in paths)
    merged = merge(docs)
    problem = document_problem(merged)
    if problem is None:
        problem = missing_file(list(zip(paths, docs, strict=True)), merged)
    if problem is not None:
        raise KubeconfigError(f"{label}: {joined}: {problem}")


_FILE_KEYS = {
    "cluster": ("clusters", ("certificate-authority",)),
    "user": ("users", ("client-certificate", "client-key", "tokenFile")),
}


def missing_file(docs: list[tuple[Path, dict[str, Any]]], merged: dict[str, Any]) -> str | None:
    """A file the current context's cluster or user names that does not exist, or None.

    A relative name is relative to the kubeconfig file that defines the entry, as kubectl
    reads it. Only the current context's entries are checked.
    """
    current = str(merged["current-context"])
    context = named(merged, "contexts")[current].get("context") or {}
    for ref, (kind, keys) in _FILE_KEYS.items():
        name = str(context.get(ref) or "")
        origin = next(((p, d) for p, d in docs if name in named(d, kind)), None)
        if origin is None:
            continue
        body = named(origin[1], kind)[name].get(ref) or {}
        for key in keys:
            value = body.get(key)
            if value and not (origin[0].parent / Path(str(value)).expanduser()).exists():
                return f"{ref} {name!r}: {key} {value}: no such file"
    return None


def resolved(doc: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``doc`` with the files its clusters and users name made absolute from ``folder`` (the
    kubeconfig file's own), as kubectl reads them; merging files then keeps each one's base."""
    out = dict(doc)
    for ref, (kind, keys) in _FILE_KEYS.items():
        items = doc.get(kind)
        if isinstance(items, list):
            out[kind] = [_resolved_entry(item, ref, keys, folder) for item in items]
    return out


def _resolved_entry(item: Any, ref: str, keys: tuple[str, ...], folder: Path) -> Any:
    body = item.get(ref) if isinstance(item, dict) else None
    if not isinstance(body, dict):
        return item
    files = {k: str(folder / Path(v).expanduser()) for k, v in body.items()
             if k in keys and isinstance(v, str) and v}  # fmt: skip
    return {**item, ref: {**body, **files}}


def load_files(label: str, paths: tuple[Path, ...]) -> dict[str, Any]:
    """The kubeconfig file(s) merged as kubectl merges them, files named absolute, after
    ``check_files`` found nothing wrong with them."""
    check_files(label, paths)
    return merge([resolved(parse_file(path)[0], path.parent) for path in paths])


def _in_cluster(environ: Mapping[str, str], account_dir: Path) -> str:
    """Why a pod's service account does not apply, or "" when it does."""
    names = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
    if not all(name in environ for name in names):
        return "KUBERNETES_SERVICE_HOST/PORT not set (not in a pod)"
    if not all(environ[name] for name in names):
        return "KUBERNETES_SERVICE_HOST/PORT set but empty"
    for name in ("token", "ca.crt"):
        if not (account_dir / name).is_file():
            return f"{account_dir / name}: no such file"
    return ""


@dataclass(frozen=True, slots=True)
class Source:
    """Where the configuration comes from: kubeconfig file(s), or a loaded in-cluster one."""

    label: str
    paths: tuple[Path, ...] = ()
    account_dir: Path | None = None
    """The service account's folder (token, ca.crt), for the in-cluster source."""


def find_source(
    explicit: str | None, environ: Mapping[str, str], home: Path, account_dir: Path
) -> Source:
    """The first source that exists, in order; ``KubeconfigError`` naming all when none does."""
    if explicit:
        return Source("--kubeconfig", (Path(explicit).expanduser(),))
    tried = ["--kubeconfig: not given"]
    env_value = environ.get("KUBECONFIG", "")
    listed = [Path(p).expanduser() for p in env_value.split(os.pathsep) if p.strip()]
    existing = tuple(p for p in listed if p.exists())
    if existing:
        return Source("$KUBECONFIG", existing)
    tried.append(f"$KUBECONFIG={env_value}: no such file" if listed else "$KUBECONFIG: not set")
    why_not = _in_cluster(environ, account_dir)
    if not why_not:
        return Source("in-cluster service account", account_dir=account_dir)
    tried.append(f"in-cluster: {why_not}")
    default = home / ".kube" / "config"
    if default.exists():
        return Source("~/.kube/config", (default,))
    tried.append(f"{default}: no such file")
    raise KubeconfigError(
        f"no cluster configuration found (tried {'; '.join(tried)}); pass --kubeconfig FILE"
    )


def check_source(
    explicit: str | None,
    environ: Mapping[str, str],
    home: Path,
    account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> Source:
    """``find_source`` and, for files, ``check_files``: the mistakes in the source itself,
    found before ``run`` imports the operator's graph."""
    source = find_source(explicit, environ, home, account_dir)
    if source.paths:
        check_files(source.label, source.paths)
    return source
