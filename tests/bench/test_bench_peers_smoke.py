"""Smoke test of the side-by-side suite: ``bench/peers.py --quick`` runs wf and reports.

Speed is never asserted (CI machines vary): only that the suite still drives
a real ``wf-rpc-server`` and ``wf worker`` processes through every workload
(W1, W2, W3, the W5 burst, W4) in both worker shapes and both modes (stock,
the default, and tuned), writes its report files into ``--out``, and ends
with the documented JSON line. It runs in the default (dev) environment: the
peers and matplotlib of the ``bench`` group are not needed (without
matplotlib the charts are skipped, and the report says so). The ratio and
summary logic is checked on made-up figures, with peers, so it holds when
the peers are installed; with Dramatiq installed and Redis up, a quick run of
wf beside Dramatiq checks the stock ratios end to end (skipped otherwise, as
in CI, which never installs the ``bench`` group).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "peers.py"
RUN_TIMEOUT_S = 600
MODES = ("stock", "tuned")
SHAPES = ("c4", "c1")
CHARTS = (
    *(
        f"{mode}_{name}"
        for mode in MODES
        for name in ("w1_throughput.png", "w2_latency.png", "w3_lateness.png", "w5_burst.png")
    ),
    "w4_queue_scaling.png",
)
STOCK_RATIOS = {
    "stock_w1_throughput_vs_best_peer",
    "stock_w2_p99_vs_best_peer",
    "stock_w3_lateness_p99_vs_best_peer",
    "stock_w5_burst_p99_vs_best_peer",
}


def _run_quick(out: Path, *args: str) -> tuple[dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) > 1, "progress lines come before the report"
    return json.loads(lines[-1]), done.stdout


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("peers-out")
    line, stdout = _run_quick(out, "--mode", "both")
    return out, line, stdout


def test_last_line_has_medians_per_mode_system_workload_and_shape(
    quick_run: tuple[Path, dict[str, Any], str],
) -> None:
    _, line, stdout = quick_run
    assert set(line["modes"]) == set(MODES)
    assert not line["failed"], stdout[-3000:]
    for mode in MODES:
        assert set(line["modes"][mode]) == {"wf"}, "--quick runs wf only"
        wf = line["modes"][mode]["wf"]
        assert {"w1", "w2", "w3", "w4", "w5"} <= wf.keys()
        for shape in SHAPES:
            assert wf["w1"][f"{shape}_throughput_per_s"] > 0, (mode, shape)
            for key in ("p50_ms", "p95_ms", "p99_ms", "max_ms"):
                assert wf["w2"][f"{shape}_{key}"] > 0, (mode, shape, key)
            for workload in ("w3", "w5"):  # lateness: may be negative
                for key in ("p50_ms", "p99_ms", "max_ms"):
                    assert isinstance(wf[workload][f"{shape}_{key}"], float), (workload, key)
        for key in ("register_p99_ms", "renew_p99_ms"):
            assert wf["w4"][key] > 0, key
    assert line["w4"]["queue_op_us"], "queue scaling measured"
    assert line["w4"]["sqlite_recovery_s"] > 0
    ratios = line["ratios"]
    assert ratios.keys() >= STOCK_RATIOS
    assert all(ratios[key] is None for key in STOCK_RATIOS), "no peer ran"
    assert ratios["tuned_w1_throughput_vs_best_peer"] is None
    stock = line["modes"]["stock"]["wf"]
    assert ratios["stock_w5_burst_p99_ms"] == pytest.approx(stock["w5"]["c4_p99_ms"], abs=0.01)
    assert ratios["stock_w3_lateness_p99_ms"] == pytest.approx(stock["w3"]["c4_p99_ms"], abs=0.01)
    assert ratios["stock_w1_wf_shape"] == "c4", "the headline shape is 2 x 4"
    assert line["mode"] == "quick"


def test_stock_is_the_default_mode() -> None:
    peers = _load("peers")
    assert peers.parse_args([]).mode == "stock"
    assert peers.parse_args(["--quick"]).mode == "stock"
    assert peers.FULL.shapes == (4, 1), "2 processes x 4 slots, then 2 x 1"
    assert peers.FULL.w5_count == 100


def test_report_files_are_written_to_out(quick_run: tuple[Path, dict[str, Any], str]) -> None:
    out, line, _ = quick_run
    assert Path(line["out"]) == out
    results = json.loads((out / "results.json").read_text())
    assert {"context", "modes", "unavailable", "w4", "ratios", "targets"} <= results.keys()
    context = results["context"]
    assert context["machine"]["cores"] >= 1
    assert "bench/peers.py" in context["command"]
    assert context["repetitions"] == 1
    assert context["modes"] == list(MODES)
    assert context["shapes"] == list(SHAPES)
    for mode in MODES:
        assert len(results["modes"][mode]["systems"]["wf"]["runs"]) == 1
    stock = results["modes"]["stock"]["systems"]["wf"]
    tuned = results["modes"]["tuned"]["systems"]["wf"]
    assert stock["non_defaults"] == [], "stock wf changes no default"
    assert any("prefetch" in s for s in tuned["non_defaults"])
    assert any("idempotent" in s for s in tuned["non_defaults"])
    table = (out / "results.md").read_text()
    for heading in (
        "Headline (stock)",
        "Stock: every system as its quick start configures it",
        "Tuned: the suite's earlier settings",
        "W1 throughput",
        "W2 light-load latency",
        "W3 delayed precision",
        "W5 burst",
        "W4 wf",
    ):
        assert heading in table
    assert table.index("Headline (stock)") < table.index("Stock: every") < table.index("Tuned:")
    if importlib.util.find_spec("matplotlib") is not None:
        for name in CHARTS:
            assert (out / name).stat().st_size > 0, name
    else:
        assert "matplotlib is not installed" in table


def _load(module: str) -> Any:
    sys.path.insert(0, str(REPO))
    try:
        return importlib.import_module(f"bench.{module}")
    finally:
        sys.path.remove(str(REPO))


def _load_report() -> Any:
    return _load("peerlib.report")


def _runs(
    c4: float | None, c1: float, p99: float, late: float, burst: float
) -> list[dict[str, Any]]:
    """One repetition: W1 per shape, and the latency figures on every shape it has."""
    shapes = {"c1": c1} if c4 is None else {"c4": c4, "c1": c1}
    return [
        {
            "w1": {s: {"throughput_per_s": v} for s, v in shapes.items()},
            "w2": {s: {"p99_ms": p99} for s in shapes},
            "w3": {s: {"p99_ms": late} for s in shapes},
            "w5": {s: {"p99_ms": burst} for s in shapes},
            "errors": [],
        }
    ]


def test_ratios_compare_wf_with_the_best_peer_at_the_headline_shape() -> None:
    report = _load_report()
    summaries = {
        "wf": report.summarize(_runs(6_000, 1_000, 2.0, 1.0, 30.0)),
        "wf-pg": report.summarize(_runs(9_000, 9_000, 0.1, 0.1, 0.1)),  # never a peer
        "celery": report.summarize(_runs(3_000, 2_000, 4.0, 2.0, 40.0)),
        "dramatiq": report.summarize(_runs(4_000, 500, 5.0, 300.0, 20.0)),
        # One job per worker: compared at 2 x 1, its only shape.
        "rq": report.summarize(_runs(None, 1_500, 3.0, 900.0, 500.0)),
    }
    ratios = report.compute_ratios(summaries, "stock")
    assert ratios["stock_w1_throughput_vs_best_peer"] == 1.5  # 6,000 / dramatiq's 4,000
    assert ratios["stock_w1_best_peer"] == "dramatiq"
    assert ratios["stock_w1_best_peer_shape"] == "c4"
    assert ratios["stock_w1_throughput_per_s"] == 6_000
    assert ratios["stock_w2_p99_vs_best_peer"] == pytest.approx(2.0 / 3.0, abs=1e-3)
    assert ratios["stock_w2_best_peer"] == "rq"
    assert ratios["stock_w2_best_peer_shape"] == "c1"
    assert ratios["stock_w3_lateness_p99_vs_best_peer"] == 0.5
    assert ratios["stock_w3_best_peer"] == "celery"
    assert ratios["stock_w5_burst_p99_vs_best_peer"] == 1.5
    assert ratios["stock_w5_best_peer"] == "dramatiq"
    assert ratios["stock_w5_burst_p99_ms"] == 30.0
    by_shape = ratios["stock_by_shape"]
    assert by_shape["w1"] == {"c4": 1.5, "c1": pytest.approx(1 / 2, abs=1e-3)}
    assert by_shape["w2"]["c4"] == 0.5  # rq has no 2 x 4: celery's 4.0 is the best there


def test_targets_follow_the_modes_that_ran() -> None:
    report = _load_report()
    summaries = {
        "wf": report.summarize(_runs(6_000, 1_000, 2.0, 1.0, 30.0)),
        "celery": report.summarize(_runs(3_000, 2_000, 4.0, 2.0, 40.0)),
    }
    results: dict[str, Any] = {
        "context": {"shapes": ["c4", "c1"]},
        "modes": {"stock": {"systems": {n: {"summary": s} for n, s in summaries.items()}}},
        "w4": {"recovery": {"sqlite_recovery_s": 2.5, "postgres_recovery_s": 3.5}},
    }
    results["ratios"] = report.all_ratios(results)
    checks = {key: met for _, key, _, _, met in report.target_checks(results)}
    assert checks["stock_w1_throughput_vs_best_peer"] is True  # 2.0 >= 1.5
    assert checks["stock_w2_p99_vs_best_peer"] is True  # 0.5 <= 0.75
    assert checks["stock_w5_burst_p99_vs_best_peer"] is True  # 0.75 <= 1
    assert checks["w4_sqlite_recovery_s"] is True
    assert checks["w4_postgres_recovery_s"] is False  # 3.5 > 3
    assert not any(key.startswith("tuned_") for key in checks), "tuned did not run"


def test_summary_is_median_with_min_and_max_per_shape() -> None:
    report = _load_report()
    runs = [{"w2": {"c4": {"p99_ms": v}}} for v in (3.0, 1.0, 2.0)]
    assert report.summarize(runs)["w2"]["c4"]["p99_ms"] == {
        "median": 2.0,
        "min": 1.0,
        "max": 3.0,
        "n": 3,
    }


def test_a_results_file_from_before_the_modes_still_renders() -> None:
    """``--report-only`` on a results.json of the tuned-only suite (W1 at 2 x 1 and
    2 x 8, W2/W3 flat on 2 x 1 workers, no W5): read as one tuned run."""
    report = _load_report()

    def old_run(c1: float, c8: float | None, p99: float) -> dict[str, Any]:
        w1: dict[str, Any] = {"c1": {"throughput_per_s": c1}}
        if c8 is not None:
            w1["c8"] = {"throughput_per_s": c8}
        return {"rep": 0, "errors": [], "w1": w1, "w2": {"p99_ms": p99}, "w3": {"p99_ms": 1.0}}

    legacy = {
        "context": {
            "date": "2026-11-29T16:49:13+00:00",
            "mode": "full",
            "command": "uv run python bench/peers.py",
            "machine": {"cores": 2},
            "repetitions": 1,
            "plan": {
                "w1_count": 10_000,
                "w2_count": 300,
                "w2_gap_s": 0.02,
                "w3_count": 100,
                "w3_gap_s": 0.02,
                "w3_ahead_s": 2.0,
            },
            "processes": 2,
            "out": "docs/benchmarks",
        },
        "systems": {
            "wf": {"description": "wf", "durable": True, "runs": [old_run(2_000, 4_000, 2.8)]},
            "celery": {"description": "c", "durable": False, "runs": [old_run(1_400, 1_500, 4.2)]},
            "rq": {"description": "rq", "durable": False, "runs": [old_run(64, None, 21.0)]},
        },
        "unavailable": {},
        "w4": {},
        "ratios": {"w1_throughput_vs_best_peer": 2.667},
    }
    upgraded = report.upgrade(legacy)
    assert list(upgraded["modes"]) == ["tuned"]
    assert upgraded["ratios"]["tuned_w1_throughput_vs_best_peer"] == pytest.approx(2.667, 1e-3)
    assert upgraded["ratios"]["tuned_w2_p99_vs_best_peer"] == pytest.approx(2.8 / 4.2, 1e-3)
    assert report.upgrade(upgraded) is upgraded, "today's layout is left as it is"
    text = report.markdown(upgraded)
    assert "predates the stock mode" in text
    assert "2 × 8" in text
    assert "W5 burst" not in text.split("### W4")[0].split("### Tuned")[1], "no W5 table"


def test_report_only_rewrites_the_report_from_results(
    quick_run: tuple[Path, dict[str, Any], str], tmp_path: Path
) -> None:
    out, line, _ = quick_run
    again = tmp_path / "again"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--report-only",
            str(out / "results.json"),
            "--out",
            str(again),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rewritten = json.loads(done.stdout.strip().splitlines()[-1])
    assert rewritten["modes"] == line["modes"]
    assert rewritten["ratios"] == line["ratios"]
    assert (again / "results.md").read_text().startswith("# Side-by-side benchmark results")


def _redis_answers() -> bool:
    redis = pytest.importorskip("redis")
    url = os.environ.get("WF_BENCH_REDIS_URL") or "redis://127.0.0.1:6379/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.exceptions.ConnectionError:
        return False
    finally:
        client.close()
    return True


def test_quick_run_beside_dramatiq_gives_the_stock_ratios(tmp_path: Path) -> None:
    """Only where the ``bench`` group is installed (never in CI) and Redis answers."""
    pytest.importorskip("dramatiq")
    if not _redis_answers():
        pytest.skip("Redis not available")
    line, stdout = _run_quick(tmp_path, "--systems", "wf,dramatiq", "--no-w4")
    assert not line["failed"], stdout[-3000:]
    assert set(line["modes"]["stock"]) == {"wf", "dramatiq"}
    dramatiq = line["modes"]["stock"]["dramatiq"]
    for workload in ("w2", "w3", "w5"):
        assert {f"{s}_p99_ms" for s in SHAPES} <= dramatiq[workload].keys(), workload
    for key in STOCK_RATIOS:
        assert line["ratios"][key] > 0, key
    for workload in ("w1", "w2", "w3", "w5"):
        assert line["ratios"][f"stock_{workload}_best_peer"] == "dramatiq"
