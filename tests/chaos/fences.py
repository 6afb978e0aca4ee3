"""The cluster's invariants, read in the shared database: who held each lease, and who wrote what.

Two sources, neither of them the nodes' word:

* **the writes**: each node connects as a role of its own (``chaos_n1``...: the URL it is given
  names it), and a trigger the run adds to every table an instance's fenced transactions write
  (:data:`AUDITED`) records, for each row written, the role that wrote it and the instance's lease
  row as that transaction sees it (its owner and epoch). ``fence()`` locks that row ``FOR SHARE``
  until the commit, so what the trigger reads is the lease the write committed under. The records
  are part of the writing transaction: a write the fence refused leaves none.
* **the leases**: the ``leases`` table, sampled every :data:`SAMPLE_S` while the run lasts.

The invariants (names as printed in the counts):

``one-holder``
    An instance's lease epoch never goes back, and one epoch is never held by two nodes: at any
    time one node at most holds an instance's lease (a takeover is an epoch bump to another node).
``writes-fenced``
    Every row of an instance is written by the node that holds its lease at that moment: a node
    stopped past its lease, a node killed, a node that lost a race writes nothing once another
    node took over.
``epochs-forward``
    An instance's writes, in the order they were made, never go back to an older epoch: nothing
    is written with a stale epoch after a takeover.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from tests.chaos.invariants import Violation
from think_server.storage.postgres import SCHEMA

#: Every table the fenced transactions of an instance write (keyed by ``instance``).
AUDITED = ("sessions", "messages", "operations", "streams", "stream_chunks", "tool_calls", "schedules",
           "compactions", "context_blocks", "workspace_files", "blobs")
CLUSTER_INVARIANTS = ("one-holder", "writes-fenced", "epochs-forward", "takeover-settles")
SAMPLE_S = 0.1
ROLE_PREFIX = "chaos_"

_AUDIT = f"""
CREATE SCHEMA IF NOT EXISTS chaos;
CREATE TABLE IF NOT EXISTS chaos.writes (
  seq bigserial PRIMARY KEY, instance bigint NOT NULL, what text NOT NULL, writer text NOT NULL,
  owner text, epoch bigint);
CREATE OR REPLACE FUNCTION chaos.audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  i bigint;
  o text;
  e bigint;
BEGIN
  IF TG_OP = 'DELETE' THEN i := OLD.instance; ELSE i := NEW.instance; END IF;
  SELECT owner, epoch INTO o, e FROM {SCHEMA}.leases WHERE instance = i;
  INSERT INTO chaos.writes (instance, what, writer, owner, epoch)
  VALUES (i, lower(TG_OP) || ':' || TG_TABLE_NAME, session_user, o, e);
  RETURN NULL;
END $$;
"""


def role_of(node: str) -> str:
    return f"{ROLE_PREFIX}{node}"


def url_as(url: str, node: str) -> str:
    """``url`` with the node's own role as its user (the throwaway server trusts every local user)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role_of(node)}@{host}"))


async def make_roles(url: str, nodes: list[str]) -> None:
    """One login role per node (superusers: the throwaway server's tables are whichever node's made them)."""
    conn = await asyncpg.connect(url)
    try:
        for node in nodes:
            await conn.execute(f"DO $$ BEGIN CREATE ROLE {role_of(node)} LOGIN SUPERUSER; "
                               "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    finally:
        await conn.close()


async def install_audit(url: str) -> None:
    """The trigger on every audited table (once the nodes migrated the schema, before any load)."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(_AUDIT)
        for table in AUDITED:
            await conn.execute(f"DROP TRIGGER IF EXISTS chaos_audit ON {SCHEMA}.{table}; "
                               f"CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE OR DELETE ON {SCHEMA}.{table} "
                               "FOR EACH ROW EXECUTE FUNCTION chaos.audit()")
    finally:
        await conn.close()


@dataclass
class Fences:
    """The cluster invariants' state across the run: :meth:`watch` samples the leases, :meth:`check_writes`
    goes over the writes recorded since its last call."""

    url: str
    violations: list[Violation] = field(default_factory=list)
    checked: Counter[str] = field(default_factory=Counter)
    stats: Counter[str] = field(default_factory=Counter)
    #: instance -> (epoch, owner) last seen in the leases table.
    leases: dict[int, tuple[int, str]] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    #: instance -> epoch of its last recorded write.
    written: dict[int, int] = field(default_factory=dict)
    last_seq: int = 0

    def fail(self, invariant: str, instance: int, evidence: str) -> None:
        self.violations.append(Violation(invariant, self.names.get(instance, f"instance {instance}"), evidence))

    async def watch(self) -> None:
        """Sample the leases until cancelled."""
        conn = await asyncpg.connect(self.url)
        try:
            while True:
                await self.sample(conn)
                await asyncio.sleep(SAMPLE_S)
        finally:
            with contextlib.suppress(Exception):
                await conn.close()

    async def sample(self, conn: asyncpg.Connection) -> None:
        rows = await conn.fetch(f"SELECT l.instance, i.name, l.owner, l.epoch FROM {SCHEMA}.leases l "
                                f"JOIN {SCHEMA}.instances i ON i.id = l.instance")
        for instance, name, owner, epoch in rows:
            self.names[instance] = name
            seen = self.leases.get(instance)
            self.leases[instance] = (epoch, owner)
            if seen is None:
                self.checked["one-holder"] += 1
                continue
            was_epoch, was_owner = seen
            if epoch < was_epoch:
                self.fail("one-holder", instance, f"the lease went back from epoch {was_epoch} ({was_owner}) "
                                                  f"to {epoch} ({owner})")
            elif epoch == was_epoch and owner != was_owner:
                self.fail("one-holder", instance, f"epoch {epoch} held by {was_owner}, then by {owner}")
            else:
                self.checked["one-holder"] += 1
                if epoch > was_epoch:
                    self.stats["takeovers (lease to another node)" if owner != was_owner
                               else "leases taken back by their node's next life"] += 1

    async def check_writes(self) -> None:
        conn = await asyncpg.connect(self.url)
        try:
            rows = await conn.fetch("SELECT seq, instance, what, writer, owner, epoch FROM chaos.writes "
                                    "WHERE seq > $1 ORDER BY seq", self.last_seq)
        finally:
            await conn.close()
        for seq, instance, what, writer, owner, epoch in rows:
            self.last_seq = seq
            self.stats["rows written (audited)"] += 1
            node = writer.removeprefix(ROLE_PREFIX)
            if owner != node:
                self.fail("writes-fenced", instance, f"write {seq} ({what}) by {node} while the lease is "
                                                     f"{owner}'s at epoch {epoch}")
            else:
                self.checked["writes-fenced"] += 1
            last = self.written.get(instance)
            if epoch is not None:
                if last is not None and epoch < last:
                    self.fail("epochs-forward", instance, f"write {seq} ({what}) by {node} at epoch {epoch}, "
                                                          f"after a write at epoch {last}")
                else:
                    self.checked["epochs-forward"] += 1
                    self.written[instance] = epoch

    async def held_with_open_work(self, node: str) -> dict[str, int]:
        """The instances ``node`` holds the lease of (expired or not) that have work open: name -> epoch."""
        conn = await asyncpg.connect(self.url)
        try:
            rows = await conn.fetch(
                f"SELECT i.name, l.epoch FROM {SCHEMA}.leases l JOIN {SCHEMA}.instances i ON i.id = l.instance "
                f"WHERE l.owner = $1 AND EXISTS (SELECT 1 FROM {SCHEMA}.operations o WHERE o.instance = l.instance "
                "AND o.status IN ('pending', 'running'))", node)
        finally:
            await conn.close()
        return {str(r[0]): int(r[1]) for r in rows}

    async def still_stuck(self, node: str, held: dict[str, int]) -> dict[str, int]:
        """Of ``held``, the instances still at the same epoch with work open (nobody took them over)."""
        now = await self.held_with_open_work(node)
        return {name: epoch for name, epoch in held.items() if now.get(name) == epoch}
