"""Which process acts on which pool when pools are sharded across replicas (issue 13).

Why this module exists: one process deciding and provisioning every pool stops scaling at some
number of pools; several processes must split the pools so that each pool is acted on by
exactly one of them, and a dead process's pools must be taken over by a live one. The split
and the takeover rule are pure and live here; ``gpucellpool.runtime.leader`` runs one Lease election
per shard with them, and ``gpucellpool.operator.app`` gates every write of a pool on its shard.

- A pool's shard is a stable hash of ``namespace/name`` modulo the number of shards. Python's
  ``hash()`` is salted per process, so two replicas would disagree; SHA-256 never does.
- Shard ``k`` is held through the Lease ``<name>-shard-<k>``; with one shard the Lease keeps
  today's name, so an upgrade from an unsharded operator contends for the same Lease.
- Each process prefers its own shard (``--shard-index``) and stands by for the others: it
  takes its own shard as soon as it is free, another shard only once that Lease stood still
  for a whole lease (its holder, and its own process, are gone). A process that holds another
  process's shard marks it as standing in and hands it back when that shard's own process
  asks for it (``wanted-by``), so a restarted replica gets its pools back instead of leaving
  one process with all of them; the Lease it hands back keeps ``wanted-by`` and a whole lease,
  so no other stand-in snatches it first. A Lease released on shutdown (a 1 s lease) is taken
  by a stand-in within seconds, as today's standby does. Unsharded, no annotation is ever
  written: today's Lease.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass

WANTED_BY_ANNOTATION = "cells.kubeswift.io/shard-wanted-by"
"""Written on a shard's Lease by a process whose own shard it is while another stands in."""
STANDING_IN_ANNOTATION = "cells.kubeswift.io/shard-standing-in"
"""Written (``"true"``) by a holder whose shard it is not: it hands the shard back on request.
Never written when unsharded, nor by a shard's own replicas, so those never ask each other."""


def shard_of(namespace: str, name: str, shards: int) -> int:
    """The shard (0 .. shards-1) of the pool ``namespace/name``; the same in every process."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def lease_name(base: str, shards: int, index: int) -> str:
    """The Lease of shard ``index``: ``base`` itself when unsharded (upgrades keep working)."""
    return base if shards == 1 else f"{base}-shard-{index}"


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """How many shards there are and which one is this process's own."""

    shards: int = 1
    index: int = 0
    """The shard this process prefers (``--shard-index``); it stands by for the others."""

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError(f"shards must be at least 1, not {self.shards}")
        if not 0 <= self.index < self.shards:
            raise ValueError(f"shard index must be in 0..{self.shards - 1}, not {self.index}")

    def of(self, key: tuple[str, str]) -> int:
        """The shard of the pool ``(namespace, name)``."""
        return shard_of(key[0], key[1], self.shards)


class Action(enum.Enum):
    RENEW = "renew"  # we hold it: write a fresh renewTime
    TAKE = "take"  # write ourselves as the holder
    WAIT = "wait"  # leave it alone this round
    ASK = "ask"  # our own shard, held by another live process: ask for it (wantedBy)
    YIELD = "yield"  # another process's shard that its own process wants back: release it


@dataclass(frozen=True, slots=True)
class LeaseSeen:
    """What one round read of a Lease, and for how long its record has stood still."""

    holder: str
    """``spec.holderIdentity``; empty when the Lease is absent or was released."""
    stood_still_s: float
    """Seconds (on this process's clock) since the record last changed, or since first read."""
    duration_s: float
    """``spec.leaseDurationSeconds`` (the holder's promise), else our own lease duration."""
    wanted_by: str = ""
    """The ``WANTED_BY_ANNOTATION`` on the Lease (empty: nobody asked)."""
    standing_in: bool = False
    """The holder marked the Lease ``STANDING_IN_ANNOTATION``: the shard is not its own."""


@dataclass(frozen=True, slots=True)
class Claim:
    action: Action
    reason: str


def claim(seen: LeaseSeen, identity: str, preferred: bool) -> Claim:
    """What to do with one shard's Lease this round, and why.

    ``preferred``: the shard is this process's own (always so when unsharded, which keeps
    client-go's rule exactly: take a free Lease at once, a held one once it expired).
    """
    if seen.holder == identity:
        if not preferred and seen.wanted_by and seen.wanted_by != identity:
            return Claim(Action.YIELD, f"its own process {seen.wanted_by!r} asks for it back")
        return Claim(Action.RENEW, "we hold it")
    expired = seen.stood_still_s >= seen.duration_s
    if seen.holder:
        return _held(seen, identity, preferred, expired)
    if preferred:
        return Claim(Action.TAKE, "free")
    if expired:
        return Claim(Action.TAKE, "free for a whole lease: its own process is not running")
    return Claim(Action.WAIT, "free, but another process's own shard: waiting a lease for it")


def _held(seen: LeaseSeen, identity: str, preferred: bool, expired: bool) -> Claim:
    """Someone else holds the Lease."""
    if expired:
        return Claim(Action.TAKE, f"{seen.holder!r} did not renew for a lease")
    if preferred and seen.standing_in and seen.wanted_by != identity:
        return Claim(Action.ASK, f"our own shard, {seen.holder!r} stands in")
    return Claim(Action.WAIT, f"held by {seen.holder!r}")
