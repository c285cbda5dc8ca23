"""Other calls' latency while four clients page through 10,000 schedules.

Theory of operation
-------------------
Issue 13, item 9: an unpaged ``workflow.schedules.list`` of 10,000 schedules
held the server's event loop for seconds, so four read-only clients listing
at once held every other request (a probe waited 7.4 s). Every list method
now answers pages of at most 100; this benchmark measures what that buys.

Setup: ``--schedules`` daily cron schedules (five zones, every 50th a
one-shot a day ahead; none comes due) are written directly through a
:class:`~wf.store.sqlite.SQLiteStore` in a temporary folder; then a real
``wf-rpc-server`` process starts on it with ``--enable-scheduler`` (the
admission service holds them all), durability ``process``, log level
warning, and two read-only token credentials (``pager`` and ``probe``).

1. **Idle probe.** One client calls ``scheduler.queue.stats`` (a cheap read)
   back to back, ``--idle-calls`` times: ``probe_idle_*``.
2. **Paging.** ``--clients`` processes (one client each, the ``pager``
   token) walk ``workflow.schedules.list`` with ``limit=--limit`` from the
   first page to ``next_cursor: null``, all at once, while this process
   goes on probing. ``probe_*`` are the probe calls that
   overlapped any walk; ``page_*`` the page calls' own latencies, ``walk_s_max``
   the slowest walk, ``page_bytes_max`` the largest page's JSON size.
   ``walks_complete`` says every walk saw every schedule once, in order.

Latencies are wall time at the client, in ms (p50, p99, max). Clients, the
probe and the server share the machine's cores.

The last line printed is one JSON object; everything before it is progress.
``--quick`` uses 1,000 schedules and fewer idle calls. Rerun:
``uv run python bench/paging.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

BIN = Path(sys.executable).parent
START_TIMEOUT_S = 60.0
TOKENS = {"pager": "bench-paging-pager-token", "probe": "bench-paging-probe-token"}
ZONES = ("UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo", "Australia/Sydney")


# ------------------------------------------------------------------ setup


async def create_schedules(root: Path, count: int) -> float:
    """``count`` schedules written through the store; returns the seconds it took."""
    from wf.schedules.model import CronTrigger, OneShotTrigger, Schedule, schedule_row
    from wf.store.sqlite import SQLiteStore

    store = SQLiteStore(root, durability="process")
    await store.open()
    started = time.perf_counter()
    try:
        now = time.time()
        for i in range(count):
            trigger: CronTrigger | OneShotTrigger = CronTrigger(
                expression=f"{i % 60} {i % 24} * * *", timezone=ZONES[i % len(ZONES)]
            )
            if i % 50 == 0:
                at = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now + 86_400 + i))
                trigger = OneShotTrigger(at=at)
            schedule = Schedule(
                schedule_id=f"sched-{i:05d}",
                deployment_id="hello.default",
                tenant="default",
                trigger=trigger,
                revision=1,
                created_at=now,
                updated_at=now,
                watermark=now,
            )
            await store.put_schedule(schedule_row(schedule), expected_revision=0)
    finally:
        await store.close()
    return time.perf_counter() - started


def start_server(workdir: Path, store_root: Path) -> tuple[subprocess.Popen[str], str]:
    """A ``wf-rpc-server`` on ``store_root``; the process and its URL."""
    from wf.server.auth import hash_token

    credentials = [
        {"name": name, "role": "read-only", "token_sha256": hash_token(token)}
        for name, token in TOKENS.items()
    ]
    config = {
        "server": {
            "store": {"durability": "process"},
            "observability": {"log_level": "warning"},
            "security": {"credentials": credentials},
        }
    }
    config_path = workdir / "server.json"
    config_path.write_text(json.dumps(config))
    log_path = workdir / "server.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [str(BIN / "wf-rpc-server"), "--port", "0", "--config", str(config_path),
             "--store-root", str(store_root), "--enable-scheduler"],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=REPO,
        )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    for line in proc.stdout:
        with contextlib.suppress(json.JSONDecodeError):
            event = json.loads(line)
            if isinstance(event, dict) and event.get("event") == "listening":
                return proc, f"http://127.0.0.1:{event['port']}"
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"wf-rpc-server did not start: {log_path.read_text()[-2000:]}")


def stop_server(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


# ----------------------------------------------------------------- pagers


def pager(url: str, limit: int) -> dict[str, Any]:
    """One client's walk over every page (run in a process of its own)."""
    return asyncio.run(_walk(url, limit))


async def _walk(url: str, limit: int) -> dict[str, Any]:
    import msgspec

    from wf.client.rpc_client import RpcClient

    ids: list[str] = []
    page_s: list[float] = []
    bytes_max = 0
    async with RpcClient(url, token=TOKENS["pager"]) as client:
        started = time.time()
        cursor: str | None = None
        while True:
            t = time.perf_counter()
            page = await client.call("workflow.schedules.list", {"limit": limit, "cursor": cursor})
            page_s.append(time.perf_counter() - t)
            bytes_max = max(bytes_max, len(msgspec.json.encode(page)))
            ids.extend(s["schedule_id"] for s in page["schedules"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        ended = time.time()
    return {"ids": ids, "page_s": page_s, "bytes_max": bytes_max, "window": (started, ended)}


# ------------------------------------------------------------------ probe


async def probe_calls(url: str, count: int | None, until: asyncio.Event | None) -> list[Any]:
    """``(start wall time, latency s)`` of back-to-back ``scheduler.queue.stats`` calls:
    ``count`` of them, or until ``until`` is set."""
    from wf.client.rpc_client import RpcClient

    samples: list[tuple[float, float]] = []
    async with RpcClient(url, token=TOKENS["probe"]) as client:
        while (count is None or len(samples) < count) and not (until and until.is_set()):
            at, t = time.time(), time.perf_counter()
            await client.call("scheduler.queue.stats", {})
            samples.append((at, time.perf_counter() - t))
    return samples


async def paging_phase(url: str, clients: int, limit: int) -> tuple[list[Any], list[Any]]:
    """Walks in ``clients`` processes while this loop probes; (walks, probe samples)."""
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    probing = asyncio.create_task(probe_calls(url, None, done))
    context = multiprocessing.get_context("spawn")
    with context.Pool(clients) as pool:
        pending = [pool.apply_async(pager, (url, limit)) for _ in range(clients)]
        walks = [await loop.run_in_executor(None, p.get) for p in pending]
    done.set()
    return walks, await probing


# ----------------------------------------------------------------- report


def ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 schedules (CI smoke)")
    parser.add_argument("--schedules", type=int, default=10_000, help="schedules stored")
    parser.add_argument("--clients", type=int, default=4, help="clients paging at once")
    parser.add_argument("--limit", type=int, default=100, help="page size, 1-100")
    parser.add_argument("--idle-calls", type=int, default=2_000, help="probe calls when idle")
    args = parser.parse_args()
    count = 1_000 if args.quick else args.schedules
    idle_calls = 200 if args.quick else args.idle_calls
    from wf.tuning import run

    with tempfile.TemporaryDirectory(prefix="wf-paging-") as scratch:
        workdir = Path(scratch)
        store_root = workdir / "store"
        create_s = run(create_schedules(store_root, count))
        print(f"paging: {count} schedules stored in {create_s:.1f} s", flush=True)
        proc, url = start_server(workdir, store_root)
        try:
            print(f"paging: server at {url}; {idle_calls} idle probe calls", flush=True)
            idle = [s for _, s in run(probe_calls(url, idle_calls, None))]
            print(f"paging: {args.clients} clients walk every page of {args.limit}", flush=True)
            walks, samples = run(paging_phase(url, args.clients, args.limit))
        finally:
            stop_server(proc)
    expected = [f"sched-{i:05d}" for i in range(count)]
    first = min(w["window"][0] for w in walks)
    last = max(w["window"][1] for w in walks)
    # Every probe call that overlapped a walk (the probe runs throughout, so at least one).
    during = [s for at, s in samples if at <= last and at + s >= first]
    page_s = [s for w in walks for s in w["page_s"]]
    report: dict[str, Any] = {
        "schedules": count,
        "clients": args.clients,
        "limit": args.limit,
        "pages_per_walk": len(walks[0]["page_s"]),
        "walks_complete": all(w["ids"] == expected for w in walks),
        "walk_s_max": round(max(w["window"][1] - w["window"][0] for w in walks), 3),
        "page_p50_ms": ms(page_s, 0.5),
        "page_p99_ms": ms(page_s, 0.99),
        "page_bytes_max": max(w["bytes_max"] for w in walks),
        "probe_idle_p50_ms": ms(idle, 0.5),
        "probe_idle_p99_ms": ms(idle, 0.99),
        "probe_calls": len(during),
        "probe_p50_ms": ms(during, 0.5),
        "probe_p99_ms": ms(during, 0.99),
        "probe_max_ms": round(max(during) * 1000, 2),
        "probe_mean_ms": round(statistics.fmean(during) * 1000, 2),
        "store": "sqlite",
        "durability": "process",
        "mode": "quick" if args.quick else "full",
        "machine_cores": os.cpu_count(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
