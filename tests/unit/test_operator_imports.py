"""The operator process does not import numpy (~15 MiB of RSS per process, issue 13's memory
targets): the forecast imports it only when a pool pre-warms, the webhook's depth check never.
Nor kubernetes_asyncio (its client package imports every API model, ~35 MiB): the one door
(``gpucellpool.kube.rest``) connects through its own transport."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import gpucellpool.operator.app, gpucellpool.operator.run, autoscaler.loop, webhook.server
from autoscaler.policy.forecast import forecast_demand
from webhook.body_depth import nesting_depth
assert nesting_depth(b'{"a": [1, {"b": "]]"}]}') == 3
print("numpy" in sys.modules)
print(forecast_demand([(0.0, 1.0), (60.0, 2.0), (120.0, 3.0)], 120.0, 60.0))
print("numpy" in sys.modules)
"""


def test_the_operator_imports_numpy_only_for_a_forecast() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out[0] == "False", "an operator module imports numpy at import time"
    assert abs(float(out[1]) - 4.0) < 1e-9  # the Theil-Sen line through the samples, 60 s on
    assert out[2] == "True"


DOOR_PROBE = """
import asyncio, sys
import gpucellpool.cli, gpucellpool.operator.app, gpucellpool.operator.run, provisioner.kube
import provisioner.workload, gpucellpool.kube.workload, webhook.server, autoscaler.loop
from gpucellpool.kube.rest import client_from_kubeconfig

async def main():
    doc = {"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "c",
           "user": "u"}}], "clusters": [{"name": "c", "cluster": {"server": "https://h:6443",
           "insecure-skip-tls-verify": True}}], "users": [{"name": "u", "user": {"token": "t"}}]}
    client = await client_from_kubeconfig(doc)
    print(client.host)
    await client.close()

asyncio.run(main())
print(sorted(m for m in sys.modules if m.split(".")[0] == "kubernetes_asyncio"))
"""


def test_the_operator_and_its_client_door_do_not_import_kubernetes_asyncio() -> None:
    out = subprocess.run(
        [sys.executable, "-c", DOOR_PROBE], capture_output=True, text=True, check=True, timeout=120
    ).stdout.splitlines()
    assert out == ["https://h:6443", "[]"]
