"""One JSON object per log line, with secrets scrubbed.

Why this module exists: operators' logs are read by machines (Loki, Elasticsearch) far more
than by people, so every line is a JSON object with the record's ``extra`` fields as keys.
Nothing secret may reach them: any field whose name suggests a credential is replaced, and
bearer tokens or PEM blocks inside messages are masked, whatever the caller passed.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

_SECRET_KEYS = re.compile(r"token|password|secret|kubeconfig|authorization|key_data|cert", re.I)
_MASKS = (
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1<redacted>"),
    (re.compile(r"-----BEGIN [A-Z ]+-----.*?-----END [A-Z ]+-----", re.S), "<redacted-pem>"),
    (re.compile(r"(?i)((?:token|password)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"), r"\1<redacted>"),
)
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def scrub(text: str) -> str:
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
