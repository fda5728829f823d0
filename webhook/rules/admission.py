"""The three entry points: validate a new pool, an update to a pool, and a scale request.

Why this module exists: it is the whole public contract of the rules, and the only place that
knows which rules run for which operation. Each entry point takes raw dicts exactly as an
AdmissionReview carries them and returns a ``Verdict``; nothing here raises on bad input,
does I/O or reads a clock. Updates ratchet: when the spec is unchanged (the operator adding or
removing its finalizer, a label edit), a pool stored under older, looser rules is not blocked,
because blocking it would also block its deletion; the violations come back as warnings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucellpool.api.spec import GPUCellPoolSpec, Provisioner
from webhook.rules.autoscaling_rules import check_autoscaling
from webhook.rules.control_chars import check_control_chars
from webhook.rules.guest_template import GuestContext, check_guest_template
from webhook.rules.names import check_name
from webhook.rules.paths import get, parse
from webhook.rules.settings import DEFAULT_SETTINGS, RuleSettings
from webhook.rules.spec_rules import check_spec
from webhook.rules.state import int_at, reachability, spec_replicas
from webhook.rules.update_rules import check_immutable, check_scale_request
from webhook.rules.verdict import Findings, Verdict
from webhook.rules.workload_rules import check_node_settings

RATCHET_WARNINGS = 3


def validate_create(obj: Any, settings: RuleSettings = DEFAULT_SETTINGS) -> Verdict:
    """Admit a new GPUCellPool (raw object dict) or say, per field, what to fix."""
    found = Findings()
    check_object(obj, settings, found)
    return found.verdict()


def validate_update(old: Any, new: Any, settings: RuleSettings = DEFAULT_SETTINGS) -> Verdict:
    """Admit a change from ``old`` to ``new`` (both raw object dicts)."""
    found = Findings()
    if isinstance(old, Mapping) and isinstance(new, Mapping) and old.get("spec") == new.get("spec"):
        probe = Findings()
        check_object(new, settings, probe)
        for err in probe.errors[:RATCHET_WARNINGS]:
            found.warn(
                err.path,
                f"stored spec breaks a rule (not blocked: unchanged by this update): {err.message}",
            )
        return found.verdict()
    check_object(new, settings, found)
    old_replicas, new_replicas = spec_replicas(old), spec_replicas(new)
    if new_replicas < old_replicas:
        _check_scale_down(old, old_replicas, new_replicas, found)
    check_immutable(old, new, found)
    return found.verdict()


def validate_scale(
    pool_old: Any, scale_new: Any, settings: RuleSettings = DEFAULT_SETTINGS
) -> Verdict:
    """Admit an autoscaling/v1 Scale written to the pool's scale subresource.

    ``pool_old`` is the stored GPUCellPool (the server reads it: the AdmissionReview of a
    subresource carries Scale objects only). ``settings`` is accepted for symmetry.
    """
    del settings
    found = Findings()
    check_scale_request(pool_old, scale_new, found)
    replicas = int_at(scale_new, "spec", "replicas")
    if not found.errors and replicas is not None and replicas < spec_replicas(pool_old):
        _check_scale_down(pool_old, spec_replicas(pool_old), replicas, found)
    return found.verdict()


def check_object(obj: Any, settings: RuleSettings, found: Findings) -> GPUCellPoolSpec | None:
    """Every create-time rule on one raw object; returns the parsed spec when it parsed."""
    if not isinstance(obj, Mapping):
        found.error("(root)", "must be a GPUCellPool object; send the whole object")
        return None
    check_name(obj, found)
    raw_spec = obj.get("spec")
    if not isinstance(raw_spec, Mapping):
        found.error("spec", "is required and must be an object; add the pool's spec")
        return None
    spec = parse(GPUCellPoolSpec, raw_spec, "spec", found)
    template = get(raw_spec, "cell", "guestTemplate")
    if isinstance(template, Mapping):
        namespace = get(obj, "metadata", "namespace")
        provisioner = spec.cell.provisioner.value if spec else get(raw_spec, "cell", "provisioner")
        ctx = GuestContext(
            namespace=namespace if isinstance(namespace, str) else "",
            settings=settings,
            cluster_api=provisioner == Provisioner.CLUSTER_API.value,
        )
        check_guest_template(template, ctx, found)
    if spec is not None:
        check_spec(spec, found)
        check_node_settings(spec, found)
        hosts = settings.allowed_prometheus_hosts
        check_autoscaling(spec.autoscaling, spec.replicas, found, hosts)
    check_control_chars(raw_spec, found)
    return spec


def _check_scale_down(pool: Any, old: int, new: int, found: Findings) -> None:
    ok, why = reachability(pool)
    if not ok:
        found.error(
            "spec.replicas",
            f"cannot go down from {old} to {new} while the workload "
            f"cluster is unreachable ({why}): cells could not be drained; restore access "
            f"to the workload cluster first, or keep replicas at {old}",
        )
