"""Self-check of the peer systems of the side-by-side suite (``bench/peerlib``).

Each peer (Celery, RQ, Procrastinate) goes once through what the driver
does with it: setup, one worker process of concurrency 1, 20 no-op tasks
enqueued up front, 5 submitted one at a time, 3 scheduled 0.5 s ahead, then
10 more tasks enqueued before two fresh worker processes start (as W1 does),
and teardown; every task must
have recorded its start. The observed latencies
and lateness are printed (``pytest -s``) for a sanity check; nothing is
asserted about speed.

A peer's test is skipped when its package is not importable (the peers come
from the ``bench`` dependency group, which CI does not install) or, for
Celery and RQ, when Redis does not answer at ``$WF_BENCH_REDIS_URL``
(default ``redis://127.0.0.1:6379/0``). Procrastinate follows the
PostgreSQL policy of ``tests/conftest.py`` (``pg_dsn``).
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
WAIT_S = 30.0
DELAYED_WAIT_S = 15.0
AHEAD_S = 0.5


def _peerlib(module: str) -> Any:
    """Import ``peerlib.<module>`` as the driver does (``bench/`` on ``sys.path``)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(f"peerlib.{module}")


def _require_redis() -> str:
    redis = pytest.importorskip("redis")
    url = _peerlib("peer_processes").redis_url()
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:
        pytest.skip(f"Redis not available at {url}: {exc}")
    finally:
        client.close()
    return str(url)


def _exercise(system: Any, tmp_path: Path) -> None:
    base = _peerlib("base")
    folder = tmp_path / "recorder"
    folder.mkdir()
    recorder = base.Recorder(folder)
    workdir = tmp_path / "work"
    workdir.mkdir()
    name = system.name

    system.setup(workdir, recorder)
    try:
        started_at = time.time()
        system.start_workers(1, 1)
        print(f"\n{name}: workers ready in {time.time() - started_at:.2f} s")

        bulk = list(base.task_ids(f"{name}-bulk", 20))
        system.enqueue_noop(bulk)
        base.wait_for(lambda: set(bulk) <= recorder.starts().keys(), WAIT_S, "bulk starts")

        latencies = []
        for task_id in base.task_ids(f"{name}-one", 5):
            submitted = system.submit_one(task_id)
            base.wait_for(lambda t=task_id: t in recorder.starts(), WAIT_S, task_id)
            latencies.append(recorder.starts()[task_id] - submitted)

        due = {t: time.time() + AHEAD_S for t in base.task_ids(f"{name}-later", 3)}
        for task_id, due_at in due.items():
            system.submit_delayed(task_id, due_at)
        base.wait_for(
            lambda: due.keys() <= recorder.starts().keys(), DELAYED_WAIT_S, "delayed starts"
        )
        starts = recorder.starts()
        lateness = [starts[t] - due_at for t, due_at in due.items()]
        assert system.pending() in (None, 0)
        print(
            f"{name}: latency ms {[round(x * 1000, 2) for x in latencies]}, "
            f"lateness ms {[round(x * 1000, 1) for x in lateness]}"
        )

        # As in W1: fresh workers (two processes) for tasks enqueued before they start.
        system.stop_workers()
        again = list(base.task_ids(f"{name}-again", 10))
        system.enqueue_noop(again)
        system.start_workers(2, 1)
        base.wait_for(lambda: set(again) <= recorder.starts().keys(), WAIT_S, "restart starts")
    finally:
        system.teardown()
    assert {*bulk, *due, *again}.issubset(recorder.starts())


def test_celery_runs_every_task(tmp_path: Path) -> None:
    pytest.importorskip("celery")
    url = _require_redis()
    _exercise(_peerlib("celery_system").CelerySystem(url), tmp_path)


def test_rq_runs_every_task(tmp_path: Path) -> None:
    pytest.importorskip("rq")
    url = _require_redis()
    _exercise(_peerlib("rq_system").RqSystem(url), tmp_path)


def test_rq_refuses_concurrency_above_one(tmp_path: Path) -> None:
    pytest.importorskip("rq")
    url = _require_redis()
    rq_system = _peerlib("rq_system")
    assert rq_system.RqSystem.max_concurrency_per_process == 1
    system = rq_system.RqSystem(url)
    system.setup(tmp_path, _peerlib("base").Recorder(tmp_path))
    try:
        with pytest.raises(ValueError, match="one job at a time"):
            system.start_workers(1, 8)
    finally:
        system.teardown()


def test_procrastinate_runs_every_task(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    pytest.importorskip("procrastinate")
    dsn = request.getfixturevalue("pg_dsn")
    system = _peerlib("procrastinate_system").ProcrastinateSystem(dsn)
    _exercise(system, tmp_path)
