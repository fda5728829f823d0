"""One JSON object per log line, with secrets scrubbed.

Why this module exists: operators' logs are read by machines (Loki, Elasticsearch) far more
than by people, so every line is a JSON object with the record's ``extra`` fields as keys.
Nothing secret may reach them: any field whose name suggests a credential is replaced, and
bearer credentials, Authorization values of any scheme, bootstrap tokens, URL userinfo,
credential-named fields and PEM blocks (even unterminated) inside messages are masked,
whatever the caller passed.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

_SECRET_KEYS = re.compile(r"token|password|secret|kubeconfig|authorization|key[_-]data|cert", re.I)
_REDACTED = r"\1<redacted>"
_MASKS = (
    # PEM blocks, also one cut short (no END line): everything from BEGIN to END or the end.
    (re.compile(r"-----BEGIN [A-Z0-9 ]+-----(?:.*?-----END [A-Z0-9 ]+-----|.*)", re.S),
     "<redacted-pem>"),
    # An Authorization header's whole value, whatever the scheme (Basic, Bearer, Digest ...).
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z-]+\s+)?)[^\s\"',}]+"),
     _REDACTED),
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), _REDACTED),
    # Credential-named fields in text, JSON or YAML (kubeconfig client-key-data, token: ...).
    (re.compile(r"(?i)((?:token|password|passwd|client-key-data|api[_-]?key|private[_-]?key)"
                r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"), _REDACTED),
    # userinfo in a URL: scheme://user:password@host
    (re.compile(r"(?i)([a-z][a-z0-9+.-]*://)[^/\s@]+@"), r"\1<redacted>@"),
    # A bare kubeadm bootstrap token (id.secret), wherever it sits in a word.
    (re.compile(r"[a-z0-9]{6}\.[a-z0-9]{16}"), "<redacted-token>"),
)  # fmt: skip
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def scrub(text: str) -> str:
    """``text`` with every credential shape this module knows masked (see ``_MASKS``)."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def _value(key: str, value: Any) -> Any:
    if _SECRET_KEYS.search(key):
        return "<redacted>"
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    return scrub(str(value))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": scrub(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = _value(key, value)
        if record.exc_info:
            entry["exception"] = scrub(self.formatException(record.exc_info))
        return json.dumps(entry, default=str)


def configure(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
