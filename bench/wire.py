"""What one JSON-RPC call costs on the wire: client CPU, server CPU and wall time.

Theory of operation
-------------------
A wf worker makes three calls per activity (the poll that brings it, its
result, the next poll) and a client one per submission, so the CPU each call
costs on both ends is the budget that light-load latency (W2 of
``bench/peers.py``) and throughput are made of. This benchmark starts a
``wf-rpc-server`` (SQLite, no workers) and makes ``--calls`` sequential
``scheduler.queue.stats`` calls (a read: no commit, so the figure is the
wire and the RPC layer, not the store) with two clients, alternating A B A B
for ``--rounds`` rounds:

* ``wf`` -- :class:`wf.client.rpc_client.RpcClient`, on the lean HTTP/1.1
  client of :mod:`wf.client.http1` (what the worker SDK and ``App`` use);
* ``aiohttp`` -- the same request through an ``aiohttp.ClientSession``
  (keep-alive, JSON body), the client wf used before.

Per client: wall µs per call (a round trip), client CPU µs per call
(``time.process_time``), and server CPU µs per call (the server process's
``utime + stime`` from ``/proc``; ``null`` where there is no ``/proc``);
each the median of the rounds.

The last line printed is one JSON object. ``--quick`` makes few calls.
Rerun: ``uv run python bench/wire.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.peerlib.base import Recorder  # noqa: E402
from bench.peerlib.wf_system import WfSystem  # noqa: E402

METHOD = "scheduler.queue.stats"


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (Linux ``/proc``), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(url: str, server_pid: int, calls: int, rounds: int) -> dict[str, Any]:
    import aiohttp
    import msgspec

    from wf.client.rpc_client import RpcClient

    client = RpcClient(url)
    session = aiohttp.ClientSession()
    encoder = msgspec.json.Encoder()
    serial = 0

    async def via_wf() -> None:
        await client.call(METHOD, {})

    async def via_aiohttp() -> None:
        nonlocal serial
        serial += 1
        body = encoder.encode([{"jsonrpc": "2.0", "id": serial, "method": METHOD, "params": {}}])
        async with session.post(
            url + "/rpc", data=body, headers={"Content-Type": "application/json"}
        ) as response:
            answer = msgspec.json.decode(await response.read())
            assert "result" in answer[0], answer

    clients: dict[str, Callable[[], Awaitable[None]]] = {"wf": via_wf, "aiohttp": via_aiohttp}
    samples: dict[str, dict[str, list[float]]] = {
        name: {"wall_us": [], "client_cpu_us": [], "server_cpu_us": []} for name in clients
    }
    try:
        for call in clients.values():  # warm-up: connections open, code paths hot
            for _ in range(50):
                await call()
        for round_no in range(rounds):
            for name, call in clients.items():
                server_before = process_cpu_s(server_pid)
                wall_before, cpu_before = time.perf_counter(), time.process_time()
                for _ in range(calls):
                    await call()
                wall = time.perf_counter() - wall_before
                cpu = time.process_time() - cpu_before
                server_after = process_cpu_s(server_pid)
                s = samples[name]
                s["wall_us"].append(wall / calls * 1e6)
                s["client_cpu_us"].append(cpu / calls * 1e6)
                if server_before is not None and server_after is not None:
                    s["server_cpu_us"].append((server_after - server_before) / calls * 1e6)
                print(
                    f"wire: round {round_no + 1} {name}: {s['wall_us'][-1]:.0f} µs per call, "
                    f"client CPU {s['client_cpu_us'][-1]:.0f} µs",
                    flush=True,
                )
    finally:
        await client.close()
        await session.close()
    return {
        name: {key: round(statistics.median(v), 1) if v else None for key, v in s.items()}
        for name, s in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few calls, one round (CI smoke)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per client per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (A B A B ...)")
    args = parser.parse_args()
    calls, rounds = (100, 1) if args.quick else (args.calls, args.rounds)
    from wf.tuning import run

    with tempfile.TemporaryDirectory(prefix="wf-wire-") as scratch:
        root = Path(scratch)
        (root / "starts").mkdir()
        system = WfSystem()
        system.setup(root / "wf", Recorder(root / "starts"))
        try:
            assert system.server is not None
            print(f"wire: {calls} calls × {rounds} rounds against {system.url}", flush=True)
            results = run(measure(system.url, system.server.pid, calls, rounds))
        finally:
            system.teardown()
    wf, reference = results["wf"], results["aiohttp"]
    report: dict[str, Any] = {
        "method": METHOD,
        "clients": results,
        "client_cpu_ratio_wf_vs_aiohttp": (
            round(wf["client_cpu_us"] / reference["client_cpu_us"], 3)
            if wf["client_cpu_us"] and reference["client_cpu_us"]
            else None
        ),
        "calls": calls,
        "rounds": rounds,
        "machine_cores": os.cpu_count(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
