"""The join-template renderer: every token, whitespace variants, unknown tokens, no secret leaks."""

from __future__ import annotations

import base64

import pytest

from provisioner.fsm.bootstrap import (
    TOKENS,
    RenderError,
    RenderInputs,
    bootstrap_secret,
    decode_template,
    find_template_errors,
    node_labels_value,
    render_template,
    seed_profile,
)
from provisioner.fsm.identity import PoolIdentity

POOL = PoolIdentity("team-a", "gpu")
INPUTS = RenderInputs(
    pool=POOL,
    index=3,
    node_labels={"gpu": "on", "zone": "a"},
    node_ip_interface="node",
    expected_gpus=1,
)
LABELS = (
    f"cells.kubeswift.io/cell=gpu-3,cells.kubeswift.io/cell-index=3,"
    f"cells.kubeswift.io/pool=gpu,cells.kubeswift.io/pool-id={POOL.pool_id},gpu=on,zone=a"
)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ cellName }}", "gpu-3"),
        ("{{ poolName }}", "gpu"),
        ("{{ nodeLabels }}", LABELS),
        ("{{ nodeIPInterface }}", "node"),
        ("{{ expectedGPUs }}", "1"),
        ("{{cellName}}", "gpu-3"),
        ("{{   cellName   }}", "gpu-3"),
        ("{{\tcellName\t}}", "gpu-3"),
        ("{{ cellName}}-{{poolName }}", "gpu-3-gpu"),
        (
            "hostname: '{{ cellName }}'\nlabels: \"{{ nodeLabels }}\"\n",
            f"hostname: 'gpu-3'\nlabels: \"{LABELS}\"\n",
        ),
        ("no tokens at all\n", "no tokens at all\n"),
        ("{ cellName } and {{ cellName }", "{ cellName } and {{ cellName }"),  # not tokens
        ("", ""),
    ],
)
def test_render(template: str, expected: str) -> None:
    assert render_template(template, INPUTS) == expected


def test_every_token_is_covered() -> None:
    assert {"cellName", "poolName", "nodeLabels", "nodeIPInterface", "expectedGPUs"} == TOKENS


def test_primary_interface_renders_empty() -> None:
    inputs = RenderInputs(pool=POOL, index=0, node_labels={})
    assert render_template("[{{ nodeIPInterface }}]", inputs) == "[]"


def test_node_labels_sorted_and_identity_wins() -> None:
    value = node_labels_value(POOL, 0, {"cells.kubeswift.io/pool": "evil", "a": "1"})
    assert value.startswith("a=1,cells.kubeswift.io/cell=gpu-0,")
    assert "cells.kubeswift.io/pool=gpu," in value and "evil" not in value


# (id, template, error code, token named, line)
ERRORS = [
    ("unknown", "x {{ password }} y", "UnknownToken", "password", 1),
    ("wrong-case", "{{ CellName }}", "UnknownToken", "CellName", 1),
    ("line-number", "a\nb\n{{ nodeName }}", "UnknownToken", "nodeName", 3),
    ("after-a-good-one", "{{ cellName }} {{ bogus }}", "UnknownToken", "bogus", 1),
    ("dashes", "{{ cell-name }}", "MalformedToken", "", 1),
    ("expression", "{{ cellName | upper }}", "MalformedToken", "", 1),
    ("empty", "{{}}", "MalformedToken", "", 1),
    ("newline-inside", "{{ cellName\n}}", "MalformedToken", "", 1),
    ("jinja-like", "{{ .Values.token }}", "MalformedToken", "", 1),
]


@pytest.mark.parametrize(
    ("template", "code", "token", "line"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS]
)
def test_unknown_or_malformed_tokens_are_errors(
    template: str, code: str, token: str, line: int
) -> None:
    result = render_template(template, INPUTS)
    assert isinstance(result, RenderError)
    assert (result.code, result.token, result.line) == (code, token, line)
    assert find_template_errors(template) == result


def test_errors_never_quote_the_template() -> None:
    secret = "K10abcdef::server:SUPERSECRET"
    template = f"token: {secret}\n{{{{ {secret[:3]}bogus }}}}\n{{{{ x y {secret} }}}}"
    result = render_template(template, INPUTS)
    assert isinstance(result, RenderError)
    assert "SUPERSECRET" not in result.message
    malformed = render_template(f"{{{{ {secret} }}}}", INPUTS)
    assert isinstance(malformed, RenderError) and secret not in malformed.message


def test_decode_template() -> None:
    assert decode_template(b"hi {{ cellName }}", "join", "user-data") == "hi {{ cellName }}"
    missing = decode_template(None, "join", "user-data")
    assert isinstance(missing, RenderError) and missing.code == "TemplateMissing"
    binary = decode_template(b"\xff\xfeSECRET", "join", "user-data")
    assert isinstance(binary, RenderError) and "SECRET" not in binary.message


def test_bootstrap_secret_has_same_bytes_under_both_keys() -> None:
    owner = [{"kind": "GPUCellPool", "name": "gpu"}]
    secret = bootstrap_secret("#cloud-config\nhostname: gpu-3\n", POOL, 3, owner)
    assert secret["metadata"]["name"] == "gpu-3-bootstrap"
    assert secret["metadata"]["namespace"] == "team-a"
    assert secret["metadata"]["ownerReferences"] == owner
    assert set(secret["data"]) == {"user-data", "value"}
    assert secret["data"]["user-data"] == secret["data"]["value"]
    assert base64.b64decode(secret["data"]["value"]).decode() == "#cloud-config\nhostname: gpu-3\n"


@pytest.mark.parametrize("set_hostname", [True, False])
def test_seed_profile(set_hostname: bool) -> None:
    seed = seed_profile(POOL, 3, set_hostname, [])
    assert seed["apiVersion"] == "seed.kubeswift.io/v1alpha1" and seed["kind"] == "SwiftSeedProfile"
    assert seed["metadata"]["name"] == "gpu-3-seed"
    spec = seed["spec"]
    assert spec["datasource"] == "NoCloud" and spec["userData"] == ""
    assert spec["userDataFrom"] == {"secretKeyRef": {"name": "gpu-3-bootstrap", "key": "user-data"}}
    assert ("metaData" in spec) is set_hostname
    if set_hostname:
        assert (
            "local-hostname: gpu-3" in spec["metaData"] and "instance-id: gpu-3" in spec["metaData"]
        )
