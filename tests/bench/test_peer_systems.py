"""Self-check of the peer systems of the side-by-side suite (``bench/peerlib``).

Each peer (Celery, RQ, Procrastinate, Dramatiq), in each mode it runs in
(``stock`` and ``tuned``: their client calls differ), goes once through
what the driver does with it: setup, one worker process of concurrency 1,
20 no-op tasks enqueued up front, 5 submitted one at a time, 3 scheduled
0.5 s ahead, 5 due together 0.5 s ahead (a small W5 burst), then 10 more
tasks enqueued before two fresh worker processes start (as W1 does), and
teardown; every task must have recorded its start. The observed latencies
and lateness are printed (``pytest -s``) for a sanity check; nothing is
asserted about speed.

A peer's test is skipped when its package is not importable (the peers come
from the ``bench`` dependency group, which CI does not install) or, for
Celery, RQ and Dramatiq, when Redis does not answer at
``$WF_BENCH_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
Procrastinate follows the PostgreSQL policy of ``tests/conftest.py``
(``pg_dsn``).
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
BURST = 5
MODES = ("stock", "tuned")


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
        instant = time.time() + AHEAD_S
        burst = list(base.task_ids(f"{name}-burst", BURST))
        for task_id in burst:
            system.submit_delayed(task_id, instant)
        base.wait_for(
            lambda: set(burst) <= recorder.starts().keys(), DELAYED_WAIT_S, "burst starts"
        )
        starts = recorder.starts()
        lateness = [starts[t] - due_at for t, due_at in due.items()]
        burst_lateness = [starts[t] - instant for t in burst]
        assert system.pending() in (None, 0)
        print(
            f"{name} ({system.mode}): latency ms {[round(x * 1000, 2) for x in latencies]}, "
            f"lateness ms {[round(x * 1000, 1) for x in lateness]}, "
            f"burst lateness ms {[round(x * 1000, 1) for x in burst_lateness]}"
        )

        # As in W1: fresh workers (two processes) for tasks enqueued before they start.
        system.stop_workers()
        again = list(base.task_ids(f"{name}-again", 10))
        system.enqueue_noop(again)
        system.start_workers(2, 1)
        base.wait_for(lambda: set(again) <= recorder.starts().keys(), WAIT_S, "restart starts")
    finally:
        system.teardown()
    assert {*bulk, *due, *burst, *again}.issubset(recorder.starts())
    assert isinstance(system.non_defaults(), list)
    if system.mode == "stock":
        assert system.setup_line()


@pytest.mark.parametrize("mode", MODES)
def test_celery_runs_every_task(tmp_path: Path, mode: str) -> None:
    pytest.importorskip("celery")
    url = _require_redis()
    _exercise(_peerlib("celery_system").CelerySystem(url, mode=mode), tmp_path)


@pytest.mark.parametrize("mode", MODES)
def test_rq_runs_every_task(tmp_path: Path, mode: str) -> None:
    pytest.importorskip("rq")
    url = _require_redis()
    _exercise(_peerlib("rq_system").RqSystem(url, mode=mode), tmp_path)


def test_rq_simple_worker_is_tuned_only() -> None:
    pytest.importorskip("rq")
    rq_system = _peerlib("rq_system")
    assert rq_system.RqSimpleWorkerSystem.modes == ("tuned",)
    with pytest.raises(ValueError, match="does not run in mode"):
        rq_system.RqSimpleWorkerSystem(mode="stock")


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


@pytest.mark.parametrize("mode", MODES)
def test_procrastinate_runs_every_task(
    tmp_path: Path, request: pytest.FixtureRequest, mode: str
) -> None:
    pytest.importorskip("procrastinate")
    dsn = request.getfixturevalue("pg_dsn")
    # The default 5 s poll is what the suite measures; here, a short one keeps the
    # delayed tasks (only noticed by that poll) within the test's patience.
    system = _peerlib("procrastinate_system").ProcrastinateSystem(
        dsn, fetch_job_polling_interval=0.5, mode=mode
    )
    _exercise(system, tmp_path)


@pytest.mark.parametrize("mode", MODES)
def test_dramatiq_runs_every_task(tmp_path: Path, mode: str) -> None:
    pytest.importorskip("dramatiq")
    url = _require_redis()
    _exercise(_peerlib("dramatiq_system").DramatiqSystem(url, mode=mode), tmp_path)


def test_dramatiq_runs_several_threads_per_process(tmp_path: Path) -> None:
    """The 2 × 4 shape: one ``dramatiq --processes 2 --threads 4`` command."""
    pytest.importorskip("dramatiq")
    url = _require_redis()
    base = _peerlib("base")
    recorder = base.Recorder(tmp_path / "recorder")
    recorder.folder.mkdir()
    system = _peerlib("dramatiq_system").DramatiqSystem(url)
    system.setup(tmp_path / "work", recorder)
    try:
        ids = list(base.task_ids("dramatiq-shape", 40))
        system.enqueue_noop(ids)
        system.start_workers(2, 4)
        base.wait_for(lambda: set(ids) <= recorder.starts().keys(), WAIT_S, "starts")
        pids = {p.name for p in recorder.folder.glob("starts-*.log")}
    finally:
        system.teardown()
    assert len(pids) >= 1
