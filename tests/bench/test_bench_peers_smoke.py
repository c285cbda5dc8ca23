"""Smoke test of the side-by-side suite: ``bench/peers.py --quick`` runs wf and reports.

Speed is never asserted (CI machines vary): only that the suite still drives
a real ``wf-rpc-server`` and ``wf worker`` processes through every workload,
writes its report files into ``--out``, and ends with the documented JSON
line. It runs in the default (dev) environment: the peers and matplotlib of
the ``bench`` group are not needed (without matplotlib the charts are
skipped, and the report says so). The ratio and summary logic is checked on
made-up figures, with peers, so it holds when the peers are installed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "peers.py"
RUN_TIMEOUT_S = 400
CHARTS = ("w1_throughput.png", "w2_latency.png", "w3_lateness.png", "w4_queue_scaling.png")
RATIO_KEYS = {"w1_throughput_vs_best_peer", "w2_p99_vs_best_peer", "w3_lateness_p99_ms"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("peers-out")
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) > 1, "progress lines come before the report"
    return out, json.loads(lines[-1]), done.stdout


def test_last_line_has_medians_per_system_and_workload(
    quick_run: tuple[Path, dict[str, Any], str],
) -> None:
    _, line, stdout = quick_run
    assert set(line["systems"]) == {"wf"}, "--quick runs wf only"
    assert not line["failed"], stdout[-3000:]
    wf = line["systems"]["wf"]
    assert {"w1", "w2", "w3", "w4"} <= wf.keys()
    for key in ("c1_throughput_per_s", "c8_throughput_per_s"):
        assert wf["w1"][key] > 0, key
    for key in ("p50_ms", "p95_ms", "p99_ms", "max_ms"):
        assert wf["w2"][key] > 0, key
    for key in ("p50_ms", "p99_ms", "max_ms"):
        assert isinstance(wf["w3"][key], float), key  # lateness: may be negative
    for key in ("register_p99_ms", "renew_p99_ms"):
        assert wf["w4"][key] > 0, key
    assert line["w4"]["queue_op_us"], "queue scaling measured"
    assert line["w4"]["sqlite_recovery_s"] > 0
    assert line["ratios"].keys() >= RATIO_KEYS
    assert line["ratios"]["w1_throughput_vs_best_peer"] is None, "no peer ran"
    assert line["ratios"]["w3_lateness_p99_ms"] == pytest.approx(wf["w3"]["p99_ms"], abs=0.01)
    assert line["mode"] == "quick"


def test_report_files_are_written_to_out(quick_run: tuple[Path, dict[str, Any], str]) -> None:
    out, line, _ = quick_run
    assert Path(line["out"]) == out
    results = json.loads((out / "results.json").read_text())
    assert {"context", "systems", "unavailable", "w4", "ratios", "targets"} <= results.keys()
    context = results["context"]
    assert context["machine"]["cores"] >= 1
    assert "bench/peers.py" in context["command"]
    assert context["repetitions"] == 1
    assert len(results["systems"]["wf"]["runs"]) == 1
    table = (out / "results.md").read_text()
    for heading in ("W1 throughput", "W2 light-load latency", "W3 delayed precision", "W4 wf"):
        assert heading in table
    if importlib.util.find_spec("matplotlib") is not None:
        for name in CHARTS:
            assert (out / name).stat().st_size > 0, name
    else:
        assert "matplotlib is not installed" in table


def _load_report() -> Any:
    sys.path.insert(0, str(REPO))
    try:
        from bench.peerlib import report
    finally:
        sys.path.remove(str(REPO))
    return report


def test_ratios_compare_wf_with_the_best_peer() -> None:
    report = _load_report()

    def runs(c1: float, c8: float | None, p99: float, late: float) -> list[dict[str, Any]]:
        w1: dict[str, Any] = {"c1": {"throughput_per_s": c1}}
        if c8 is not None:
            w1["c8"] = {"throughput_per_s": c8}
        return [{"w1": w1, "w2": {"p99_ms": p99}, "w3": {"p99_ms": late}, "errors": []}]

    summaries = {
        "wf": report.summarize(runs(1_000, 6_000, 2.0, 1.0)),
        "wf-fsync": report.summarize(runs(9_000, 9_000, 0.1, 0.1)),  # never a peer
        "celery": report.summarize(runs(2_000, 3_000, 4.0, 2.0)),
        "rq": report.summarize(runs(1_500, None, 3.0, 900.0)),
    }
    ratios = report.compute_ratios(summaries)
    assert ratios["w1_throughput_vs_best_peer"] == 2.0  # 6,000 / celery's best 3,000
    assert ratios["w1_best_peer"] == "celery"
    assert ratios["w1_throughput_vs_best_peer_by_setting"] == {"c1": 0.5, "c8": 2.0}
    assert ratios["w2_p99_vs_best_peer"] == pytest.approx(2.0 / 3.0, abs=1e-3)
    assert ratios["w2_best_peer"] == "rq"
    assert ratios["w3_lateness_p99_ms"] == 1.0
    assert ratios["w3_best_peer"] == "celery"


def test_summary_is_median_with_min_and_max() -> None:
    report = _load_report()
    runs = [{"w2": {"p99_ms": v}} for v in (3.0, 1.0, 2.0)]
    assert report.summarize(runs)["w2"]["p99_ms"] == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}


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
    assert rewritten["systems"] == line["systems"]
    assert rewritten["ratios"] == line["ratios"]
    assert (again / "results.md").read_text().startswith("# Side-by-side benchmark results")
