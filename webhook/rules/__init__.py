"""Admission rules for GPUCellPool: pure functions from raw objects to verdicts.

Why this package exists: the validating webhook is a security control (a pool becomes
privileged launcher pods) and the first place a user learns what is wrong with a manifest.
Keeping the rules pure (no I/O, no clock, no logging) lets them be tested exhaustively, run by
the TLS server and re-run by the provisioner at render time.

Public API::

    validate_create(obj, settings=DEFAULT_SETTINGS) -> Verdict
    validate_update(old, new, settings=DEFAULT_SETTINGS) -> Verdict
    validate_scale(pool_old, scale_new, settings=DEFAULT_SETTINGS) -> Verdict
    Verdict(allowed, reasons: tuple[FieldError, ...], warnings: tuple[FieldError, ...])
    FieldError(path, message); RuleSettings(strict_guest_template, allowed_sriov_resources,
    allow_blank_data_disks, allowed_prometheus_hosts, allowed_storage_classes)
    referenced_secrets(obj) / new_secret_references(old, new) -> ((path, secret name), ...)
        for the server's SubjectAccessReview (may the requesting user get these Secrets?)
"""

from webhook.rules.admission import validate_create, validate_scale, validate_update
from webhook.rules.references import new_secret_references, referenced_secrets
from webhook.rules.settings import DEFAULT_SETTINGS, RuleSettings
from webhook.rules.verdict import FieldError, Verdict

__all__ = [
    "DEFAULT_SETTINGS",
    "FieldError",
    "RuleSettings",
    "Verdict",
    "new_secret_references",
    "referenced_secrets",
    "validate_create",
    "validate_scale",
    "validate_update",
]
