"""``uv build`` makes a wheel that installs and runs outside the repository.

The wheel is built into a temporary folder and installed into a fresh virtual
environment (``uv venv``) with the locked versions of its dependencies and
without the ``postgres`` extra (the SQLite-only install). NOTE: installing
needs PyPI, or uv's cache holding those wheels (it does wherever ``uv sync``
ran, CI included). Then, from a folder outside the repository:

* the migrations' ``.sql`` files are inside the wheel, every one of them;
* ``wf --version`` runs, and the package is the installed one, not ``src/``;
* the README's main job runs: ``wf-rpc-server --sample`` listens, its one-shot
  schedule's run completes (seen through the installed ``wf`` CLI), its notes
  say ``wf ...`` rather than ``uv run wf ...``, SIGTERM drains with exit 0,
  and ``wf store check`` calls the store consistent;
* a PostgreSQL store without the driver is refused with one line naming the
  extra to install.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SQL = REPO / "src" / "wf" / "store" / "sql"
STEP_TIMEOUT_S = 300.0
"""Bound for one build or install step (a cold cache downloads)."""
RUN_TIMEOUT_S = 60.0
"""Bound for the server to listen and its sample one-shot run to complete."""


def _uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    if found is None:
        pytest.fail("uv is needed to build and install the wheel (CI installs it)")
    return found


def _clean_env() -> dict[str, str]:
    """The environment without the checkout's virtual environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(*argv: str | Path, cwd: Path, timeout: float = STEP_TIMEOUT_S) -> str:
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{argv} exited {done.returncode}: {done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, the virtual environment's bin folder)."""
    tmp = tmp_path_factory.mktemp("wheel")
    uv = _uv()
    _run(uv, "build", "--wheel", "--out-dir", tmp / "dist", REPO, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("wf-*.whl")
    requirements = tmp / "requirements.txt"
    _run(
        uv, "export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes", "--quiet",
        "--output-file", requirements, cwd=REPO,
    )  # fmt: skip
    _run(uv, "venv", "--quiet", tmp / "venv", cwd=tmp)
    python = tmp / "venv" / "bin" / "python"
    _run(uv, "pip", "install", "--quiet", "--python", python, "-r", requirements, wheel, cwd=tmp)
    return wheel, python.parent


def test_the_wheel_holds_every_migration(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as archive:
        held = {n for n in archive.namelist() if n.endswith(".sql")}
    expected = {f"wf/store/sql/{p.relative_to(SQL).as_posix()}" for p in SQL.rglob("*.sql")}
    assert expected <= held
    assert any(n.startswith("wf/store/sql/sqlite/0001") for n in held)
    assert any(n.startswith("wf/store/sql/postgres/0001") for n in held)


def test_the_installed_package_runs_outside_the_repository(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    _, bin_dir = installed
    where = _run(bin_dir / "python", "-c", "import wf; print(wf.__file__)", cwd=tmp_path)
    assert "site-packages" in where
    assert str(REPO) not in where
    assert _run(bin_dir / "wf", "--version", cwd=tmp_path).startswith("wf ")
    # The SQLite-only install leaves the PostgreSQL driver out...
    probe = "import importlib.util as u; print(u.find_spec('psycopg') is None)"
    assert _run(bin_dir / "python", "-c", probe, cwd=tmp_path).strip() == "True"
    # ...and says which extra brings it when a PostgreSQL store is asked for.
    refused = subprocess.run(
        [str(bin_dir / "wf"), "store", "check", "--postgres", "postgresql://nobody@127.0.0.1/x"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        check=False,
    )
    assert refused.returncode == 2, refused.stderr
    assert "wf[postgres]" in refused.stderr
    assert refused.stderr.count("\n") == 1


def _events(path: Path) -> list[dict[str, Any]]:
    found = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


def test_the_main_job_runs_from_the_installed_package(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    _, bin_dir = installed
    out, err = tmp_path / "out.jsonl", tmp_path / "err.log"
    store = tmp_path / ".wf_store"
    with out.open("w") as out_file, err.open("w") as err_file:
        server = subprocess.Popen(
            [bin_dir / "wf-rpc-server", "--store-root", store, "--sample", "--port", "0"],
            cwd=tmp_path,
            env=_clean_env(),
            stdout=out_file,
            stderr=err_file,
            text=True,
        )
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        url = None
        completed: list[dict[str, Any]] = []
        while not completed:
            assert server.poll() is None, f"the server exited: {err.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no completed run: {err.read_text()[-3000:]}"
            if url is None:
                port = next((e["port"] for e in _events(out) if e["event"] == "listening"), None)
                url = None if port is None else f"http://127.0.0.1:{port}"
            if url is not None:
                listed = json.loads(
                    _run(bin_dir / "wf", "runs", "list", "--server", url, "--json", cwd=tmp_path)
                )
                completed = [r for r in listed["runs"] if r["status"] == "completed"]
            time.sleep(0.2)
        notes = err.read_text()
        assert "    wf schedules occurrences hello-soon" in notes
        assert "uv run wf" not in notes
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        code = server.wait(RUN_TIMEOUT_S)
    assert code == 0, err.read_text()[-3000:]
    assert [e["event"] for e in _events(out)][-1] == "stopped"
    check = _run(bin_dir / "wf", "store", "check", "--store-root", store, cwd=tmp_path)
    assert check == "store is consistent: no contradictions found\n"
