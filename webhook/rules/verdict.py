"""The result of an admission check: allowed or not, with field-named reasons and warnings.

Why this module exists: every rule reports through the same small vocabulary, so the server can
turn a verdict into an AdmissionReview response (``status.message`` from the reasons,
``warnings`` from the warnings) and tests can assert on paths instead of prose. ``Findings`` is
the mutable accumulator rules write into while they run; it is turned into an immutable
``Verdict`` at the end. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_REASONS = 50
"""Cap on reasons (and warnings) in one verdict, so a junk object cannot flood a response."""


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem at one field: ``path`` is a JSON-style path such as ``spec.cell.gpu.count``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether an admission request is allowed, and why not (``reasons``) or what to watch."""

    allowed: bool
    reasons: tuple[FieldError, ...] = ()
    warnings: tuple[FieldError, ...] = ()

    def message(self) -> str:
        """All reasons as one human-readable line (for AdmissionResponse.status.message)."""
        return "; ".join(str(r) for r in self.reasons)

    def warning_messages(self) -> tuple[str, ...]:
        """Warnings as strings (for AdmissionResponse.warnings)."""
        return tuple(str(w) for w in self.warnings)

    def paths(self) -> tuple[str, ...]:
        """The paths of all reasons, in order."""
        return tuple(r.path for r in self.reasons)


ALLOW = Verdict(allowed=True)


@dataclass(slots=True)
class Findings:
    """Accumulates errors and warnings while rules run; ``verdict()`` freezes them."""

    errors: list[FieldError] = field(default_factory=list)
    warnings: list[FieldError] = field(default_factory=list)

    def error(self, path: str, message: str) -> None:
        """Record a problem that denies the request."""
        _add(self.errors, FieldError(path, message))

    def warn(self, path: str, message: str) -> None:
        """Record a problem that is allowed but worth telling the user about."""
        _add(self.warnings, FieldError(path, message))

    def covers(self, path: str) -> bool:
        """True when an error was already reported at ``path`` or at one of its parents."""
        return any(
            path == e.path or path.startswith((e.path + ".", e.path + "[")) for e in self.errors
        )

    def extend(self, other: Findings) -> None:
        """Add everything another accumulator found."""
        for e in other.errors:
            _add(self.errors, e)
        for w in other.warnings:
            _add(self.warnings, w)

    def verdict(self) -> Verdict:
        """The immutable verdict: allowed exactly when there is no error."""
        return Verdict(
            allowed=not self.errors, reasons=tuple(self.errors), warnings=tuple(self.warnings)
        )


def _add(into: list[FieldError], item: FieldError) -> None:
    if len(into) < MAX_REASONS and item not in into:
        into.append(item)
