"""The machine's floor for light-load dispatch: what one process-to-process hop costs.

Theory of operation
-------------------
W2 of ``bench/peers.py`` submits one task every 20 ms to idle workers, so
every process on the path is asleep when the message arrives, and each hop
pays the operating system's wake-up on top of the transfer. This benchmark
measures exactly that, with no wf, Celery or HTTP code at all: two Python
processes on loopback, the parent sends 16 bytes over a TCP connection, the
child echoes them back (one ``recv``, one ``send`` each, ``TCP_NODELAY``).

* ``hop_idle_us`` -- half a round trip when the parent waits ``--gap-ms``
  (20) between messages, as W2 does: the child is asleep in ``recv`` and
  the parent sleeps too; p50, p99.
* ``hop_busy_us`` -- half a round trip back to back (both stay warm).
* ``dispatch_floor_ms`` -- the least a dispatch that crosses ``hops``
  process boundaries can take at light load: ``hops`` × the idle p50.
  wf crosses three (client → server, the server's answer to the waiting
  poll → worker, and the server's own store commit, which is on the loop
  thread when the writer is idle, so it adds none), Celery and RQ two
  (client → Redis → worker) plus, for Celery's prefork pool, a pipe to the
  child process.

The last line printed is one JSON object. ``--quick`` takes fewer samples.
Rerun: ``uv run python bench/floor.py``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import socket
import statistics
import time
from typing import Any

MESSAGE = b"0123456789abcdef"


def _echo(port: int) -> None:
    """The child: echo every message until the parent closes."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(len(MESSAGE)):
            conn.sendall(data)


def _hops(conn: socket.socket, count: int, gap_s: float) -> list[float]:
    """Half round trips in microseconds, ``gap_s`` of sleep before each."""
    halves: list[float] = []
    for _ in range(count):
        if gap_s:
            time.sleep(gap_s)
        began = time.perf_counter()
        conn.sendall(MESSAGE)
        received = b""
        while len(received) < len(MESSAGE):
            received += conn.recv(len(MESSAGE) - len(received))
        halves.append((time.perf_counter() - began) / 2 * 1e6)
    return halves


def nearest_rank(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered), max(1, round(fraction * len(ordered) + 0.5))) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (CI smoke test)")
    parser.add_argument("--gap-ms", type=float, default=20.0, help="sleep before each idle hop")
    args = parser.parse_args()
    count = 50 if args.quick else 500
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        child = multiprocessing.get_context("spawn").Process(target=_echo, args=(port,))
        child.start()
        conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _hops(conn, 20, 0.0)  # warm-up
            print(f"floor: {count} idle hops, {args.gap_ms:g} ms apart", flush=True)
            idle = _hops(conn, count, args.gap_ms / 1000)
            print(f"floor: {count} hops back to back", flush=True)
            busy = _hops(conn, count, 0.0)
        child.join(10)
    idle_p50 = statistics.median(idle)
    report: dict[str, Any] = {
        "hop_idle_p50_us": round(idle_p50, 1),
        "hop_idle_p99_us": round(nearest_rank(idle, 0.99), 1),
        "hop_busy_p50_us": round(statistics.median(busy), 1),
        "hop_busy_p99_us": round(nearest_rank(busy, 0.99), 1),
        "dispatch_floor_ms": {
            "wf (3 hops)": round(3 * idle_p50 / 1000, 3),
            "celery, rq (2 hops)": round(2 * idle_p50 / 1000, 3),
        },
        "gap_ms": args.gap_ms,
        "samples": count,
        "machine_cores": os.cpu_count(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
