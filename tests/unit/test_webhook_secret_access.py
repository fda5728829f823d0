"""The Secret-reference access check (no confused deputy), through the webhook's HTTP handler.

A pool author must not read a Secret through the operator that RBAC does not let them read:
every Secret a CREATE references, and each one an UPDATE newly references, is checked with a
SubjectAccessReview for the REQUESTING user. Here the apiserver's answer comes from a small
``SecretAccess`` stand-in (the real review runs in
``tests/integration/test_webhook_secret_access.py``); what is under test is the server: who is
asked about, what is asked, and that a refusal, an error or a timeout each deny.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.unit.test_webhook_rules import POOL
from webhook import server as server_module
from webhook.review import UserInfo, access_review, parse_review, secret_checks
from webhook.server import VALIDATE_PATH, SecretAccess, WebhookServer
from webhook.tls import ServingTLS

USER = {
    "username": "alice",
    "uid": "u-1",
    "groups": ["tenants", "system:authenticated"],
    "extra": {"scopes": ["a", "b"]},
}
AUTH = "spec.autoscaling.prometheus.authSecretRef.name"


class Pools:
    async def get_pool(self, namespace: str, name: str) -> Any:
        return None


class Readable:
    """``SecretAccess`` allowing exactly the listed Secret names; records every question."""

    def __init__(self, *names: str) -> None:
        self.names = set(names)
        self.asked: list[tuple[UserInfo, str, str]] = []

    async def may_get_secret(self, user: UserInfo, namespace: str, name: str) -> bool:
        self.asked.append((user, namespace, name))
        return name in self.names


class Failing(Readable):
    async def may_get_secret(self, user: UserInfo, namespace: str, name: str) -> bool:
        self.asked.append((user, namespace, name))
        raise ConnectionError("apiserver unreachable")


class Hanging(Readable):
    async def may_get_secret(self, user: UserInfo, namespace: str, name: str) -> bool:
        self.asked.append((user, namespace, name))
        await asyncio.Event().wait()
        return True


def with_prometheus_token(secret: str = "db-creds") -> dict[str, Any]:
    obj = copy.deepcopy(POOL)
    obj["spec"]["autoscaling"] = {
        "prometheus": {
            "url": "https://prometheus.attacker.example",
            "authSecretRef": {"name": secret, "key": "password"},
        }
    }
    return obj


def review(obj: Any, operation: str = "CREATE", old: Any = None, sub: str = "") -> bytes:
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "cells.kubeswift.io", "version": "v1alpha1", "kind": "GPUCellPool"},
        "operation": operation,
        "namespace": "cells",
        "name": "unit",
        "object": obj,
        "oldObject": old,
        "userInfo": USER,
    }
    if sub:
        request["subResource"] = sub
    doc = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(doc).encode()


@pytest.fixture
async def post() -> AsyncIterator[Any]:
    clients: list[TestClient[Any, Any]] = []

    async def send(access: SecretAccess | None, body: bytes) -> dict[str, Any]:
        server = WebhookServer(ServingTLS(), Pools(), secret_access=access)
        client = TestClient(TestServer(server.app()))
        await client.start_server()
        clients.append(client)
        answer = await client.post(VALIDATE_PATH, data=body)
        assert answer.status == 200
        result: dict[str, Any] = (await answer.json())["response"]
        return result

    yield send
    for client in clients:
        await client.close()


def causes(answer: dict[str, Any]) -> dict[str, str]:
    return {c["field"]: c["message"] for c in answer["status"]["details"]["causes"]}


async def test_a_secret_the_user_may_not_read_is_refused_with_its_field(post: Any) -> None:
    access = Readable("join", "kc")  # may read the join and kubeconfig Secrets, not db-creds
    answer = await post(access, review(with_prometheus_token()))
    assert answer["allowed"] is False
    assert set(causes(answer)) == {AUTH}
    assert "'db-creds'" in causes(answer)[AUTH] and "may not get" in causes(answer)[AUTH]
    user = access.asked[0][0]
    assert (user.username, user.uid, user.groups) == ("alice", "u-1", tuple(USER["groups"]))
    assert user.extra == (("scopes", ("a", "b")),)
    assert sorted(name for _, ns, name in access.asked if ns == "cells") == [
        "db-creds",
        "join",
        "kc",
    ]


async def test_a_user_who_may_read_every_referenced_secret_is_admitted(post: Any) -> None:
    answer = await post(Readable("join", "kc", "db-creds"), review(with_prometheus_token()))
    assert answer["allowed"] is True


@pytest.mark.parametrize(
    ("path", "keys"),
    [
        ("spec.bootstrap.joinSecretRef.name", ("bootstrap", "joinSecretRef")),
        (
            "spec.workloadCluster.kubeconfigSecretRef.name",
            ("workloadCluster", "kubeconfigSecretRef"),
        ),
    ],
)
async def test_join_and_kubeconfig_references_are_checked_too(
    post: Any, path: str, keys: tuple[str, str]
) -> None:
    obj = copy.deepcopy(POOL)
    obj["spec"][keys[0]][keys[1]]["name"] = "someone-elses"
    answer = await post(Readable("join", "kc"), review(obj))
    assert answer["allowed"] is False and set(causes(answer)) == {path}


async def test_an_update_checks_only_the_newly_referenced_secrets(post: Any) -> None:
    access = Readable()  # may read nothing
    old = copy.deepcopy(POOL)
    new = with_prometheus_token()
    answer = await post(access, review(new, "UPDATE", old))
    assert answer["allowed"] is False and set(causes(answer)) == {AUTH}
    assert [name for _, _, name in access.asked] == ["db-creds"]
    unchanged = Readable()
    answer = await post(unchanged, review(new, "UPDATE", copy.deepcopy(new)))
    assert answer["allowed"] is True and unchanged.asked == []  # e.g. a finalizer write


async def test_a_failed_review_denies(post: Any) -> None:
    answer = await post(Failing(), review(with_prometheus_token()))
    assert answer["allowed"] is False
    assert all("could not check" in why for why in causes(answer).values())
    assert AUTH in causes(answer)


async def test_a_review_that_never_answers_denies(
    post: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "ACCESS_REVIEW_TIMEOUT", 0.05)
    answer = await post(Hanging(), review(with_prometheus_token()))
    assert answer["allowed"] is False and "could not check" in causes(answer)[AUTH]


async def test_without_a_reviewer_references_are_denied(post: Any) -> None:
    answer = await post(None, review(with_prometheus_token()))
    assert answer["allowed"] is False and AUTH in causes(answer)


async def test_a_pool_the_rules_refuse_costs_no_review(post: Any) -> None:
    access = Readable()
    obj = with_prometheus_token()
    obj["spec"]["autoscaling"]["prometheus"]["url"] = "http://169.254.169.254/"
    answer = await post(access, review(obj))
    assert answer["allowed"] is False and access.asked == []


def test_secret_checks_per_operation() -> None:
    new = with_prometheus_token()
    create = parse_review(review(new))
    assert [path for path, _ in secret_checks(create)] == [
        "spec.bootstrap.joinSecretRef.name",
        "spec.workloadCluster.kubeconfigSecretRef.name",
        AUTH,
    ]
    assert secret_checks(parse_review(review(new, "UPDATE", POOL))) == ((AUTH, "db-creds"),)
    assert secret_checks(parse_review(review(new, "UPDATE", POOL, sub="status"))) == ()
    assert secret_checks(parse_review(review(new, "DELETE"))) == ()


def test_the_access_review_names_the_requesting_user_and_the_secret() -> None:
    user = parse_review(review(POOL)).user
    body = access_review(user, "cells", "db-creds")
    assert body["kind"] == "SubjectAccessReview"
    assert body["spec"] == {
        "user": "alice",
        "uid": "u-1",
        "groups": ["tenants", "system:authenticated"],
        "extra": {"scopes": ["a", "b"]},
        "resourceAttributes": {
            "namespace": "cells",
            "verb": "get",
            "group": "",
            "version": "v1",
            "resource": "secrets",
            "name": "db-creds",
        },
    }
