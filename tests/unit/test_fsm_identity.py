"""Identity: names, strict index parsing, namespace-unique pool id, ownership, liveness, reaping."""

from __future__ import annotations

import pytest

from provisioner.fsm.identity import (
    CELL_INDEX_LABEL,
    CELL_LABEL,
    INSTANCE_LABEL,
    MAX_POOL_NAME_LENGTH,
    POOL_ID_LABEL,
    POOL_LABEL,
    KubeletHeartbeat,
    Liveness,
    NodeDisposition,
    NodeFacts,
    PoolIdentity,
    cell_name,
    is_owned_node,
    kubelet_liveness,
    node_disposition,
    parse_cell_index,
)

NOW = 50_000.0
POOL = PoolIdentity("team-a", "gpu")
OTHER_NS = PoolIdentity("team-b", "gpu")


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("gpu-0", 0),
        ("gpu-7", 7),
        ("gpu-99999", 99999),
        ("gpu-01", None),  # leading zero
        ("gpu-100000", None),  # six digits
        ("gpu--1", None),
        ("gpu-+1", None),
        ("gpu-1a", None),
        ("gpu-", None),
        ("gpu", None),
        ("gpu-a-1", None),  # another pool's cell
        ("gpux-1", None),
        ("gpu-1 ", None),
        ("gpu-\u0661", None),  # non-ASCII digit (ARABIC-INDIC ONE)
    ],
)
def test_parse_cell_index_is_strict(name: str, index: int | None) -> None:
    assert parse_cell_index("gpu", name) == index


def test_cell_name_roundtrip_and_bounds() -> None:
    assert cell_name("gpu", 12) == "gpu-12"
    assert parse_cell_index("gpu", cell_name("gpu", 12)) == 12
    with pytest.raises(ValueError):
        cell_name("gpu", 100000)
    assert MAX_POOL_NAME_LENGTH == 57
    assert len(cell_name("p" * 57, 99999)) == 63


def test_pool_id_is_namespace_unique_stable_and_label_safe() -> None:
    assert POOL.pool_id != OTHER_NS.pool_id
    assert POOL.pool_id == PoolIdentity("team-a", "gpu").pool_id
    assert len(POOL.pool_id) == 16 and all(c in "0123456789abcdef" for c in POOL.pool_id)
    # "a/b-c" vs "a-b/c" style ambiguities cannot collide: the separator is not a name char.
    assert PoolIdentity("a", "b-c").pool_id != PoolIdentity("a-b", "c").pool_id


def test_cell_labels() -> None:
    assert POOL.cell_labels(3) == {
        POOL_LABEL: "gpu",
        POOL_ID_LABEL: POOL.pool_id,
        CELL_LABEL: "gpu-3",
        CELL_INDEX_LABEL: "3",
    }


# (id, labels, known instance UIDs, owned?)
OWNERSHIP = [
    ("ours", POOL.cell_labels(0), frozenset(), True),
    ("same-name-other-namespace", OTHER_NS.cell_labels(0), frozenset(), False),
    ("unlabelled", {}, frozenset(), False),
    ("other-pool", PoolIdentity("team-a", "cpu").cell_labels(0), frozenset(), False),
    (
        "legacy-with-our-instance",
        {POOL_LABEL: "gpu", INSTANCE_LABEL: "u1"},
        frozenset({"u1"}),
        True,
    ),
    (
        "legacy-unknown-instance",
        {POOL_LABEL: "gpu", INSTANCE_LABEL: "u9"},
        frozenset({"u1"}),
        False,
    ),
    ("legacy-no-instance", {POOL_LABEL: "gpu"}, frozenset({"u1"}), False),
]


@pytest.mark.parametrize(
    ("labels", "known", "owned"), [c[1:] for c in OWNERSHIP], ids=[c[0] for c in OWNERSHIP]
)
def test_ownership(labels: dict[str, str], known: frozenset[str], owned: bool) -> None:
    assert is_owned_node(labels, POOL, known) is owned


# (id, heartbeat, liveness)
LIVENESS = [
    ("lease-fresh", KubeletHeartbeat(True, True, NOW - 89), Liveness.LIVE),
    ("lease-stale", KubeletHeartbeat(True, True, NOW - 91), Liveness.DEAD),
    ("lease-never-renewed", KubeletHeartbeat(True, True, None), Liveness.DEAD),
    (
        "lease-stale-beats-fresh-status",
        KubeletHeartbeat(True, True, NOW - 200, NOW - 1),
        Liveness.DEAD,
    ),
    ("lease-missing-status-fresh", KubeletHeartbeat(True, False, None, NOW - 359), Liveness.LIVE),
    ("lease-unreadable-status-old", KubeletHeartbeat(False, False, None, NOW - 361), Liveness.DEAD),
    ("nothing-known", KubeletHeartbeat(), Liveness.UNKNOWN),
]


@pytest.mark.parametrize(
    ("beat", "expected"), [c[1:] for c in LIVENESS], ids=[c[0] for c in LIVENESS]
)
def test_kubelet_liveness(beat: KubeletHeartbeat, expected: Liveness) -> None:
    assert kubelet_liveness(beat, NOW) is expected


DEAD = KubeletHeartbeat(True, True, NOW - 1000)
LIVE = KubeletHeartbeat(True, True, NOW - 1)
UNKNOWN = KubeletHeartbeat()


def facts(name: str, instance: str, beat: KubeletHeartbeat, pool: PoolIdentity = POOL) -> NodeFacts:
    labels = pool.cell_labels(parse_cell_index("gpu", name) or 0)
    if instance:
        labels[INSTANCE_LABEL] = instance
    return NodeFacts(name, labels, beat)


# (id, node, current cells {name: uid}, disposition)
DISPOSITIONS = [
    ("current", facts("gpu-0", "u0", DEAD), {"gpu-0": "u0"}, NodeDisposition.CURRENT),
    ("fresh-without-instance", facts("gpu-0", "", DEAD), {"gpu-0": "u0"}, NodeDisposition.CURRENT),
    ("stale-dead", facts("gpu-0", "old", DEAD), {"gpu-0": "u0"}, NodeDisposition.REAP_STALE),
    ("stale-live-adopted", facts("gpu-0", "old", LIVE), {"gpu-0": "u0"}, NodeDisposition.ADOPT),
    (
        "stale-unknown-never-deleted",
        facts("gpu-0", "old", UNKNOWN),
        {"gpu-0": "u0"},
        NodeDisposition.ADOPT,
    ),
    ("orphan-dead", facts("gpu-5", "x", DEAD), {"gpu-0": "u0"}, NodeDisposition.REAP_ORPHAN),
    ("orphan-live", facts("gpu-5", "x", LIVE), {"gpu-0": "u0"}, NodeDisposition.KEEP_ORPHAN),
    ("orphan-unknown", facts("gpu-5", "x", UNKNOWN), {}, NodeDisposition.KEEP_ORPHAN),
    (
        "other-namespace-dead",
        facts("gpu-0", "zz", DEAD, OTHER_NS),
        {"gpu-0": "u0"},
        NodeDisposition.FOREIGN,
    ),
    ("unlabelled-dead", NodeFacts("gpu-0", {}, DEAD), {"gpu-0": "u0"}, NodeDisposition.FOREIGN),
]


@pytest.mark.parametrize(
    ("node", "current", "disposition"),
    [c[1:] for c in DISPOSITIONS],
    ids=[c[0] for c in DISPOSITIONS],
)
def test_node_disposition(
    node: NodeFacts, current: dict[str, str], disposition: NodeDisposition
) -> None:
    assert node_disposition(node, POOL, current, NOW) is disposition
