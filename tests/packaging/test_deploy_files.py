"""The deployment files in ``deploy/`` say what docs/deploy.md says they do.

The systemd units carry the hardening the page describes (a unit missing one
would still start, so only a test notices), the example configuration is one
the server accepts, and the Dockerfile builds from the wheel in two stages.
``systemd-analyze verify`` checks the units' syntax where it is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from wf.server.config import load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
HARDENING = (
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "PrivateDevices=yes",
    "DynamicUser=yes",
    "UMask=0077",
    "CapabilityBoundingSet=",
    "RestrictSUIDSGID=yes",
    "SystemCallFilter=@system-service",
)


def _directives(unit: Path) -> set[str]:
    return {
        line.strip()
        for line in unit.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    }


@pytest.mark.parametrize("name", ["wf-server.service", "wf-worker@.service"])
def test_units_are_hardened(name: str) -> None:
    found = _directives(DEPLOY / name)
    assert set(HARDENING) <= found
    assert "KillSignal=SIGTERM" in found


def test_the_server_unit_may_write_its_store_only() -> None:
    found = _directives(DEPLOY / "wf-server.service")
    assert {"StateDirectory=wf", "StateDirectoryMode=0700", "ReadWritePaths=/var/lib/wf"} <= found
    assert "ExecStart=/opt/wf/bin/wf-rpc-server --config /etc/wf/server.json" in found


def test_the_worker_unit_keeps_its_token_off_the_command_line() -> None:
    found = _directives(DEPLOY / "wf-worker@.service")
    assert "EnvironmentFile=/etc/wf/worker-%i.env" in found
    (start,) = [d for d in found if d.startswith("ExecStart=")]
    assert "--token" not in start
    example = (DEPLOY / "worker.env.example").read_text()
    assert "WF_WORKER_TOKEN=" in example


def test_the_example_configuration_is_accepted() -> None:
    config = load_config(DEPLOY / "server.json")
    assert config.server.store.root == "/var/lib/wf/store"
    assert config.server.store.retention.older_than_s == 30 * 86_400


def test_the_image_is_built_from_the_wheel_in_two_stages() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert text.count("\nFROM ") == 2
    assert "uv build --wheel" in text
    assert "uv export --frozen" in text
    assert "USER wf" in text
    assert 'ENTRYPOINT ["wf-rpc-server"]' in text


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    server = tmp_path / "wf-server.service"
    worker = tmp_path / "wf-worker@test.service"
    shutil.copy(DEPLOY / "wf-server.service", server)
    shutil.copy(DEPLOY / "wf-worker@.service", worker)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(server), str(worker)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # /opt/wf is not installed here: that is the only complaint allowed.
    problems = [
        line
        for line in done.stderr.splitlines()
        if line.strip() and "is not executable: No such file or directory" not in line
    ]
    assert problems == []
