"""Real ``wf-rpc-server`` nodes on one PostgreSQL schema, and ``wf worker`` processes.

:class:`Cluster` starts N nodes (``--postgres DSN --postgres-schema S
--port P --advertise-url http://127.0.0.1:P --node-id nI``, ports picked
first), reads their JSON stdout lines, and waits, polling ``/readyz`` under
a deadline, until exactly one answers 200. It hands the test each node to
SIGKILL, SIGTERM, freeze (SIGSTOP) and thaw (SIGCONT) or restart, and starts
workers of :mod:`ledger_app` that know every node's URL.

*Who wrote what.* Every node connects as a PostgreSQL role of its own
(``wf_ha_<node id>``, a superuser made on first use), so the database itself
can say which node a transaction came from (``session_user``), whatever the
server sets on its sessions. :meth:`Cluster.install_audit` adds statement
triggers to the scheduler's and the catalog's tables that record, once per
write transaction, the fence's epoch and commit sequence as that
transaction sees them, whether the transaction advanced the fence itself,
and the node; :mod:`checks` holds the cluster to them.

Processes are started from the interpreter's own folder (no ``uv run``),
logs go to files under the test's folder, and :meth:`Cluster.close` kills
whatever still runs (thawing frozen ones first).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .pg_instance import free_port

BIN: Final = Path(sys.executable).parent
REPO: Final = Path(__file__).resolve().parents[2]
APP: Final = "tests.ha.ledger_app:worker"
START_TIMEOUT_S: Final = 30.0
"""Bound for a process to print its ``listening`` line (imports on a loaded 2-core box)."""
STOP_TIMEOUT_S: Final = 15.0
ACTIVE_TIMEOUT_S: Final = 30.0
"""Bound for the cluster to have exactly one active node."""
PROBE_TIMEOUT_S: Final = 0.5
"""HTTP timeout of one ``/readyz`` probe (a frozen node must not hold the poll)."""
POLL_S: Final = 0.02
ROLE_PREFIX: Final = "wf_ha_"
AUDITED_TABLES: Final = (
    "activities",
    "transitions",
    "workers",
    "counters",
    "runs",
    "schedules",
    "occurrences",
    "artifacts",
    "deployments",
)
"""Every table a scheduler or catalog write transaction touches (the fence row aside)."""


def server_config(
    *, lease_ttl_s: float = 4.0, log_level: str = "warning", extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A node's config file: a short lease (so a failover outlasts it), and a scheduler
    that admits promptly and in parallel. Workers heartbeat at ``wf worker``'s
    default interval (5 s); 12 misses keep the heartbeat grace far above what a
    worker needs to find the new active (its interval plus one 3 s attempt on a
    frozen node, docs/ha.md), so that what these tests see is the lease grace."""
    config: dict[str, Any] = {
        "server": {
            "scheduler": {"poll_interval_s": 0.2, "max_concurrent_runs": 64},
            "observability": {"log_level": log_level},
        },
        "dispatch": {"lease_ttl_s": lease_ttl_s, "heartbeat_misses_max": 12},
    }
    for key, value in (extra or {}).items():
        config[key] = {**config.get(key, {}), **value}
    return config


def wait_until(check: Callable[[], bool], what: str, timeout_s: float) -> None:
    """Poll ``check`` until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(POLL_S)


def ensure_roles(dsn: str, names: Iterable[str]) -> None:
    """Create the nodes' PostgreSQL roles if missing (superusers: they run migrations)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            role = ROLE_PREFIX + name
            # Concurrent test runs may race to create it: a duplicate is fine.
            conn.execute(
                sql.SQL(
                    "DO $$ BEGIN CREATE ROLE {} LOGIN SUPERUSER; "
                    "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
                ).format(sql.Identifier(role))
            )


def node_dsn(dsn: str, node_id: str, *, host: str | None = None, port: int | None = None) -> str:
    """``dsn`` as node ``node_id``'s role, optionally through another host/port (a proxy)."""
    changes: dict[str, Any] = {"user": ROLE_PREFIX + node_id}
    if host is not None:
        changes["host"] = host
    if port is not None:
        changes["port"] = str(port)
    return make_conninfo(dsn, **changes)


def dsn_host_port(dsn: str) -> tuple[str, int]:
    """The host and port a DSN points at."""
    params = conninfo_to_dict(dsn)
    return str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)


def _lines_into(stream: IO[str], sink: queue.Queue[str], copy: Path) -> None:
    """Queue every line, and keep a copy on disk (the events are a failure's evidence)."""
    with stream, copy.open("a") as kept:
        for line in stream:
            sink.put(line)
            kept.write(f"{time.time():.3f} {line}")
            kept.flush()


def http_status(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> int | None:
    """The HTTP status of a GET (``None``: no answer in time, or no connection)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, TimeoutError):
        return None


def rpc(url: str, method: str, params: dict[str, Any] | None = None, timeout_s: float = 5.0) -> Any:
    """One raw JSON-RPC call (no client failover: the answer of *this* node)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}})
    request = urllib.request.Request(
        f"{url}/rpc", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            reply = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        reply = json.loads(exc.read())
    if "error" in reply:
        raise RpcError(reply["error"])
    return reply["result"]


class RpcError(Exception):
    """A JSON-RPC error answer (``data.code`` is the wf error code)."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(json.dumps(error))
        self.error = error
        data = error.get("data") or {}
        self.code: str | None = data.get("code") if isinstance(data, dict) else None
        self.details: dict[str, Any] = data.get("details") or {} if isinstance(data, dict) else {}


@dataclass
class Node:
    """One ``wf-rpc-server`` of the cluster (its process changes on a restart)."""

    node_id: str
    port: int
    dsn: str
    config_path: Path
    log_dir: Path
    proc: subprocess.Popen[str] | None = None
    events: queue.Queue[str] = field(default_factory=queue.Queue)
    seen: list[dict[str, Any]] = field(default_factory=list)
    """Every JSON stdout line of every run of this node, in order."""
    frozen: bool = False
    starts: int = 0
    schema: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.node_id}.{self.starts}.log"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self, *extra: str) -> None:
        """Start the process (without waiting for it)."""
        self.starts += 1
        self.events = queue.Queue()
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [
                    str(BIN / "wf-rpc-server"),
                    "--postgres",
                    self.dsn,
                    "--postgres-schema",
                    self.schema,
                    "--port",
                    str(self.port),
                    "--advertise-url",
                    self.url,
                    "--node-id",
                    self.node_id,
                    "--config",
                    str(self.config_path),
                    "--enable-scheduler",
                    *extra,
                ],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=REPO,
            )
        assert self.proc.stdout is not None
        events_path = self.log_dir / f"{self.node_id}.{self.starts}.events"
        threading.Thread(
            target=_lines_into, args=(self.proc.stdout, self.events, events_path), daemon=True
        ).start()

    def drain_events(self) -> list[dict[str, Any]]:
        """Stdout lines that arrived since the last call (also kept in :attr:`seen`)."""
        fresh = []
        while True:
            try:
                line = self.events.get_nowait()
            except queue.Empty:
                break
            try:
                fresh.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        self.seen.extend(fresh)
        return fresh

    def wait_listening(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """Wait for this run's ``listening`` line."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while True:
            for event in self.drain_events():
                if event.get("event") == "listening":
                    return event
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"node {self.node_id} did not start (exit {self.proc.poll()}): "
                    f"{self.log_path.read_text()[-3000:]}"
                )
            time.sleep(POLL_S)

    def ready(self) -> bool:
        """``/readyz`` answers 200 (a frozen or dead node does not)."""
        return not self.frozen and self.alive() and http_status(f"{self.url}/readyz") == 200

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.frozen = False
            self.proc.wait(STOP_TIMEOUT_S)

    def term(self) -> None:
        """SIGTERM (the node drains and leaves); does not wait."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def freeze(self) -> None:
        """SIGSTOP: the process keeps its sockets but does nothing."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        """SIGCONT."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.frozen = False

    def status(self) -> dict[str, Any]:
        """This node's ``cluster.status`` answer."""
        result: dict[str, Any] = rpc(self.url, "cluster.status")
        return result


@dataclass
class WorkerProc:
    """A ``wf worker`` of :data:`APP`."""

    worker_id: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)


class Cluster:
    """N nodes on one schema, their workers, and the ledger file (module docstring)."""

    def __init__(
        self,
        tmp: Path,
        dsn: str,
        schema: str,
        *,
        nodes: int = 3,
        config: dict[str, Any] | None = None,
        node_dsns: dict[str, str] | None = None,
    ) -> None:
        self.tmp = tmp
        self.dsn = dsn
        """The superuser DSN (the checks and the faults use it)."""
        self.schema = schema
        self.ledger = tmp / "ledger.jsonl"
        self.ledger.touch()
        config_path = tmp / "server.json"
        config_path.write_text(json.dumps(config or server_config()))
        ids = [f"n{i + 1}" for i in range(nodes)]
        ensure_roles(dsn, ids)
        self.nodes: dict[str, Node] = {}
        for node_id in ids:
            node = Node(
                node_id=node_id,
                port=free_port(),
                dsn=(node_dsns or {}).get(node_id) or node_dsn(dsn, node_id),
                config_path=config_path,
                log_dir=tmp,
            )
            node.schema = schema
            self.nodes[node_id] = node
        self.workers: dict[str, WorkerProc] = {}

    # ------------------------------------------------------------------ nodes

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes.values()]

    def start(self, first: str | None = None) -> Node:
        """Start every node (``first`` alone until it is active, then the others) and
        wait until exactly one is active; returns it."""
        if first is not None:
            self.nodes[first].launch()
            self.nodes[first].wait_listening()
            self.wait_active(among=[first])
        others = [n for n in self.nodes.values() if n.node_id != first]
        for node in others:
            node.launch()
        for node in others:
            node.wait_listening()
        return self.wait_active()

    def restart(self, node_id: str) -> Node:
        """Start a stopped node again on the same port; waits for its ``listening`` line."""
        node = self.nodes[node_id]
        assert not node.alive(), f"{node_id} still runs"
        node.launch()
        node.wait_listening()
        return node

    def live(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.alive() and not n.frozen]

    def actives(self, among: Sequence[str] | None = None) -> list[Node]:
        """The nodes answering ``/readyz`` 200 right now."""
        pool = [self.nodes[i] for i in among] if among else self.live()
        return [n for n in pool if n.ready()]

    def wait_active(
        self,
        *,
        among: Sequence[str] | None = None,
        exclude: Iterable[str] = (),
        timeout_s: float = ACTIVE_TIMEOUT_S,
    ) -> Node:
        """Wait until exactly one node (not in ``exclude``) answers ``/readyz`` 200."""
        skip = set(exclude)
        found: list[Node] = []

        def one() -> bool:
            found[:] = [n for n in self.actives(among) if n.node_id not in skip]
            return len(found) == 1

        wait_until(one, f"exactly one active node (excluding {sorted(skip)})", timeout_s)
        return found[0]

    # ---------------------------------------------------------------- workers

    def start_worker(self, worker_id: str, *extra: str) -> WorkerProc:
        """``wf worker`` of :data:`APP` with every node's URL (does not wait)."""
        log_path = self.tmp / f"{worker_id}.log"
        servers = [arg for url in self.urls for arg in ("--server", url)]
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [
                    str(BIN / "wf"),
                    "worker",
                    "--app",
                    APP,
                    *servers,
                    "--worker-id",
                    worker_id,
                    "--log-level",
                    "warning",
                    *extra,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd=REPO,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "WF_HA_LEDGER": str(self.ledger)},
            )
        worker = WorkerProc(worker_id=worker_id, proc=proc, log_path=log_path)
        self.workers[worker_id] = worker
        return worker

    def registered_workers(self) -> set[str]:
        """Worker ids the store records as registered and active."""
        with self.connect() as conn:
            rows = conn.execute("SELECT worker_id FROM workers WHERE status = 'active'").fetchall()
        return {str(r[0]) for r in rows}

    def start_workers(self, *worker_ids: str, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start workers and wait until the store has them registered."""
        for wid in worker_ids:
            self.start_worker(wid)
        wait_until(
            lambda: set(worker_ids) <= self.registered_workers(),
            f"workers {worker_ids} registered",
            timeout_s,
        )

    # ------------------------------------------------------------- database

    def connect(self) -> psycopg.Connection[Any]:
        """A superuser session on the cluster's schema (autocommit)."""
        conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        return conn

    def fence(self) -> tuple[int, int]:
        """``(epoch, commit_seq)`` of the fence row now."""
        with self.connect() as conn:
            row = conn.execute("SELECT epoch, commit_seq FROM fence WHERE id = 1").fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def fence_owner(self) -> str | None:
        """The node the fence row names as the owner of its epoch."""
        with self.connect() as conn:
            row = conn.execute("SELECT owner_node FROM fence WHERE id = 1").fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def wait_settled(self, *, timeout_s: float = ACTIVE_TIMEOUT_S) -> Node:
        """Wait until exactly one node is ready and it is the one the fence names."""
        found: list[Node] = []

        def settled() -> bool:
            found[:] = self.actives()
            if len(found) != 1:
                return False
            node = found[0].node_id
            return self.fence_owner() == node and self.lock_holder() == node

        wait_until(settled, "one active node, owning the fence and the lock", timeout_s)
        return found[0]

    def install_audit(self) -> None:
        """The write audit (module docstring): idempotent, call once the schema exists."""
        schema = sql.Identifier(self.schema)
        with self.connect() as conn:
            conn.execute(
                sql.SQL(
                    """
                CREATE TABLE IF NOT EXISTS {s}.ha_audit (
                    xid        xid8 PRIMARY KEY,
                    epoch      BIGINT NOT NULL,
                    commit_seq BIGINT NOT NULL,
                    fenced     BOOLEAN NOT NULL,
                    node       TEXT NOT NULL,
                    at         TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
                )"""
                ).format(s=schema)
            )
            # The fence row's xmin is this transaction's id only if the transaction
            # itself advanced the fence (fence_advance() runs first in every write).
            conn.execute(
                sql.SQL(
                    """
                CREATE OR REPLACE FUNCTION {s}.ha_audit_write() RETURNS trigger
                LANGUAGE plpgsql AS $$
                BEGIN
                    INSERT INTO {s}.ha_audit (xid, epoch, commit_seq, fenced, node)
                    SELECT pg_current_xact_id(), f.epoch, f.commit_seq,
                           f.xmin = pg_current_xact_id()::xid, session_user
                    FROM {s}.fence f WHERE f.id = 1
                    ON CONFLICT (xid) DO NOTHING;
                    RETURN NULL;
                END $$"""
                ).format(s=schema)
            )
            for table in AUDITED_TABLES:
                conn.execute(
                    sql.SQL(
                        "CREATE OR REPLACE TRIGGER {name} AFTER INSERT OR UPDATE OR DELETE "
                        "ON {s}.{t} FOR EACH STATEMENT EXECUTE FUNCTION {s}.ha_audit_write()"
                    ).format(
                        name=sql.Identifier(f"ha_audit_{table}"),
                        s=schema,
                        t=sql.Identifier(table),
                    )
                )

    def audit(self) -> list[tuple[int, int, bool, str]]:
        """``(epoch, commit_seq, fenced, node)`` of every audited write, by commit_seq."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT epoch, commit_seq, fenced, node FROM ha_audit ORDER BY commit_seq, xid"
            ).fetchall()
        return [(int(e), int(s), bool(f), str(n).removeprefix(ROLE_PREFIX)) for e, s, f, n in rows]

    def writer_backend(self) -> int | None:
        """The backend pid of the session holding the ownership lock (the active's
        writer), or ``None`` if nobody holds it."""
        from wf.store.postgres import ownership_lock_key

        with self.connect() as conn:
            row = conn.execute(
                """
                SELECT l.pid FROM pg_locks l
                WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                  AND l.database = (SELECT oid FROM pg_database
                                    WHERE datname = current_database())
                  AND ((l.classid::bigint << 32) | l.objid::bigint) = %s::bigint
                """,
                [ownership_lock_key(self.schema)],
            ).fetchone()
        return None if row is None else int(row[0])

    def lock_holder(self) -> str | None:
        """The node whose session holds the ownership lock (by its PostgreSQL role)."""
        pid = self.writer_backend()
        if pid is None:
            return None
        with self.connect() as conn:
            row = conn.execute(
                "SELECT usename FROM pg_stat_activity WHERE pid = %s", [pid]
            ).fetchone()
        return None if row is None else str(row[0]).removeprefix(ROLE_PREFIX)

    def terminate_writer(self) -> int:
        """``pg_terminate_backend`` of the active's writer session; returns its pid."""
        pid = self.writer_backend()
        assert pid is not None, "nobody holds the ownership lock"
        with self.connect() as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", [pid])
        return pid

    # ----------------------------------------------------------------- close

    def close(self) -> None:
        """Stop workers, then kill every node (thawing frozen ones first)."""
        for worker in self.workers.values():
            if worker.proc.poll() is None:
                worker.proc.kill()
        for node in self.nodes.values():
            if node.proc is not None and node.proc.poll() is None:
                if node.frozen:
                    node.thaw()
                node.proc.kill()
        for worker in self.workers.values():
            worker.proc.wait(STOP_TIMEOUT_S)
        for node in self.nodes.values():
            if node.proc is not None:
                node.proc.wait(STOP_TIMEOUT_S)
                if node.proc.stdout is not None:
                    node.proc.stdout.close()
