"""``wf deploy`` against a real ``wf-rpc-server`` process (schedules on, one
in-process worker serving the built-in activities).

``wf deploy`` runs as a real ``wf`` process in a folder holding the user's
flow module, as a user runs it: a first deploy creates the artifact, the
deployment and the cron schedule; a second changes nothing and says so; an
edited flow makes version 2 and moves the deployment while the schedule stays;
a new cron updates the schedule in place. A run of the deployment then
executes the built plan. Refusals of the flow itself exit 2 before any server
is contacted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e._servers import rpc_server
from wf.cli import deploy_cmd
from wf.cli.main import main
from wf.client.app import App
from wf.errors import NotFound

BIN = Path(sys.executable).parent
START_TIMEOUT_S = 30.0

FLOWS = """
from wf import flow
from wf.activities import format_text, upper


@flow.workflow("greeting")
def greeting() -> flow.Outputs:
    name = flow.input("name", str, default="world")
    text = flow.call(format_text, id="text", template="{TEMPLATE}", name=name)
    loud = flow.call(upper, id="loud", text=text["text"])
    return {"result": loud["text"]}


@flow.workflow("needs_name")
def needs_name() -> flow.Outputs:
    name = flow.input("name", str)
    return {"result": flow.call(upper, id="loud", text=name)["text"]}


not_a_flow = 3
"""


def _write_flows(folder: Path, template: str) -> None:
    source = FLOWS.replace("{TEMPLATE}", template)
    (folder / "g2_deploy_flows.py").write_text(textwrap.dedent(source))


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("deploy-cli")
    with rpc_server(
        root, "--workers", "1", "--enable-scheduler", "--no-ui", start_timeout_s=START_TIMEOUT_S
    ) as url:
        yield url


def _wf_deploy(folder: Path, url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``wf deploy g2_deploy_flows:greeting *argv`` as a real process in ``folder``."""
    return subprocess.run(
        [str(BIN / "wf"), "deploy", "g2_deploy_flows:greeting", *argv, "--server", url],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _deploy(folder: Path, url: str, *argv: str) -> dict[str, Any]:
    done = _wf_deploy(folder, url, *argv, "--json")
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_deploy_is_idempotent_versions_edits_and_updates_the_schedule(
    server_url: str, tmp_path: Path
) -> None:
    _write_flows(tmp_path, "hello {name}")
    cron = ("--cron", "0 9 * * *", "--tz", "Europe/Paris")

    first = _deploy(tmp_path, server_url, "--name", "prod", *cron)
    assert first["artifact"]["version"] == 1
    assert first["artifact"]["action"] == "created"
    assert first["deployment"] == {
        "deployment_id": "greeting.prod",
        "artifact_version": 1,
        "revision": 1,
        "action": "created",
    }
    assert first["schedule"]["schedule_id"] == "greeting.prod"
    assert first["schedule"]["action"] == "created"
    assert first["changed"] is True

    again = _deploy(tmp_path, server_url, "--name", "prod", *cron)
    assert again["changed"] is False
    assert again["artifact"] == {**first["artifact"], "action": "unchanged"}
    assert again["deployment"] == {**first["deployment"], "action": "unchanged"}
    assert again["schedule"] == {**first["schedule"], "action": "unchanged"}

    # The text form says so too.
    as_text = _wf_deploy(tmp_path, server_url, "--name", "prod", *cron)
    assert as_text.returncode == 0, as_text.stderr
    text = as_text.stdout
    assert text.splitlines()[0].startswith("artifact greeting v1: unchanged (sha256:")
    assert text.splitlines()[-1] == "nothing changed"

    _write_flows(tmp_path, "hi {name}")
    edited = _deploy(tmp_path, server_url, "--name", "prod", *cron)
    assert edited["artifact"]["version"] == 2
    assert edited["artifact"]["action"] == "created"
    assert edited["artifact"]["content_hash"] != first["artifact"]["content_hash"]
    assert edited["deployment"] == {
        "deployment_id": "greeting.prod",
        "artifact_version": 2,
        "revision": 2,
        "action": "updated",
    }
    assert edited["schedule"]["action"] == "unchanged"

    moved = _deploy(tmp_path, server_url, "--name", "prod", "--cron", "30  8 * * MON-FRI")
    assert moved["artifact"]["action"] == "unchanged"
    assert moved["deployment"]["action"] == "unchanged"
    assert moved["schedule"]["action"] == "updated"
    assert moved["schedule"]["revision"] == first["schedule"]["revision"] + 1
    # Written differently, the same trigger as stored (canonical): nothing to do.
    same = _deploy(tmp_path, server_url, "--name", "prod", "--cron", "30 8 * * mon-fri")
    assert same["changed"] is False

    with App.sync(server_url) as app:
        schedule = app.get_schedule("greeting.prod")
        assert schedule["trigger"] == {
            "kind": "cron",
            "expression": "30 8 * * mon-fri",
            "timezone": "UTC",
        }
        assert schedule["deployment_id"] == "greeting.prod"
        run = app.run(lambda a: a.start_run("greeting.prod", {"name": "ada"}))
        done = app.wait_for_run(run["run_id"], timeout=30)
        assert done["status"] == "completed", done
        assert done["output"] == {"result": "HI ADA"}


def test_deploy_without_cron_leaves_no_schedule(server_url: str, tmp_path: Path) -> None:
    _write_flows(tmp_path, "plain {name}")
    answer = _deploy(tmp_path, server_url, "--name", "plain", "--input", "name=bob")
    assert answer["schedule"] is None
    assert answer["deployment"]["action"] == "created"
    with App.sync(server_url) as app:
        deployment = app.get_deployment("greeting.plain")
        assert deployment.default_inputs == {"name": "bob"}
        run = app.run(lambda a: a.start_run("greeting.plain"))
        done = app.wait_for_run(run["run_id"], timeout=30)
        assert done["output"] == {"result": "PLAIN BOB"}
    again = _deploy(tmp_path, server_url, "--name", "plain", "--input", "name=bob")
    assert again["changed"] is False


@pytest.mark.parametrize(
    ("target", "extra", "message"),
    [
        ("g2_deploy_flows", [], "expected MODULE:FLOW"),
        ("g2_deploy_nothing:flow", [], "cannot import 'g2_deploy_nothing'"),
        ("g2_deploy_syntax:flow", [], "cannot import 'g2_deploy_syntax': invalid syntax"),
        ("g2_deploy_raises:flow", [], "cannot import 'g2_deploy_raises': KeyError: 'nope'"),
        ("g2_deploy_flows:missing", [], "has no 'missing'"),
        ("g2_deploy_flows:not_a_flow", [], "is a int, not a flow"),
        ("g2_deploy_broken:broken", [], "node 'double': activity 'upper' has no parameter"),
        ("g2_deploy_flows:greeting", ["--tz", "UTC"], "--tz needs --cron"),
        ("g2_deploy_flows:needs_name", ["--cron", "0 9 * * *"], "give them with --input"),
        ("g2_deploy_flows:greeting", ["--cron", "@daily"], "invalid_cron_expression"),
        (
            "g2_deploy_flows:greeting",
            ["--cron", "0 9 * * *", "--tz", "Mars/Base"],
            "invalid_timezone",
        ),
        (
            "g2_deploy_flows:greeting",
            ["--cron", "0 9 * * *", "--schedule-id", "Not An Id"],
            "--schedule-id: invalid_argument",
        ),
    ],
)
def test_flows_that_cannot_be_used_exit_2_before_any_server_call(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    target: str,
    extra: list[str],
    message: str,
) -> None:
    _write_flows(tmp_path, "x")
    (tmp_path / "g2_deploy_broken.py").write_text(
        textwrap.dedent(
            """
            from wf import flow
            from wf.activities import upper

            @flow.workflow
            def broken() -> flow.Outputs:
                flow.call(upper, id="double", txt="oops")
                return None
            """
        )
    )
    (tmp_path / "g2_deploy_syntax.py").write_text("def flow(:\n")
    (tmp_path / "g2_deploy_raises.py").write_text("flow = {}['nope']\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("g2_deploy_flows", "g2_deploy_broken", "g2_deploy_raises"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    # A closed port: reaching the server would fail with exit 1, not 2.
    code = main(["deploy", target, "--name", "x", *extra, "--server", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err


def test_a_deleted_schedule_id_is_not_reused(server_url: str, tmp_path: Path) -> None:
    _write_flows(tmp_path, "late {name}")
    cron = ("--cron", "0 3 * * *")
    first = _deploy(tmp_path, server_url, "--name", "late", *cron)
    assert first["schedule"]["action"] == "created"
    with App.sync(server_url) as app:
        app.delete_schedule("greeting.late")
    # The flow edited meanwhile: the refusal comes before its new version is written.
    _write_flows(tmp_path, "later {name}")
    done = _wf_deploy(tmp_path, server_url, "--name", "late", *cron)
    assert done.returncode == 2, done.stderr
    assert "was deleted and schedule ids are never reused" in done.stderr
    with App.sync(server_url) as app:
        version = first["artifact"]["version"]
        assert app.get_deployment("greeting.late").artifact_version == version
        listed = app.run(lambda a: a.list_artifacts("greeting", limit=100))
        assert max(a.version for a in listed.artifacts) == version
    _write_flows(tmp_path, "late {name}")
    again = _deploy(tmp_path, server_url, "--name", "late", *cron, "--schedule-id", "late-2")
    assert again["schedule"]["schedule_id"] == "late-2"
    assert again["schedule"]["action"] == "created"
    assert again["deployment"]["action"] == "unchanged"


def test_a_server_without_schedules_refuses_before_anything_is_written(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    root = tmp_path_factory.mktemp("deploy-no-schedules")
    _write_flows(tmp_path, "unscheduled {name}")
    with rpc_server(root, "--workers", "0", "--no-ui", start_timeout_s=START_TIMEOUT_S) as url:
        done = _wf_deploy(tmp_path, url, "--name", "prod", "--cron", "0 9 * * *")
        assert done.returncode == 1, done.stderr
        assert "schedules are not enabled" in done.stderr
        with App.sync(url) as app:
            assert app.run(lambda a: a.list_artifacts("greeting", limit=10)).artifacts == []
            with pytest.raises(NotFound):
                app.get_deployment("greeting.prod")
        # Without --cron the same server takes it.
        assert _deploy(tmp_path, url, "--name", "prod")["deployment"]["action"] == "created"


def test_a_schedule_refused_after_the_writes_says_what_was_written_and_a_rerun_converges(
    server_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A schedule of another tenant takes the id between the deployment and the
    schedule step (a race no read beforehand can see): the server refuses the
    schedule, and the error says what was written and what was not."""
    _write_flows(tmp_path, "race {name}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "g2_deploy_flows", raising=False)
    real = deploy_cmd._save_deployment

    def racing(app: Any, flow: Any, version: int, args: Any) -> dict[str, Any]:
        saved = real(app, flow, version, args)
        rival = {"artifact_id": "greeting", "artifact_version": version, "name": "rival"}
        app.run(lambda a: a.save_deployment({**rival, "tenant": "t2"}, expected_revision=0))
        app.create_schedule(
            "greeting.race", "greeting.rival", {"kind": "cron", "expression": "0 1 * * *"}
        )
        return saved

    def deploy(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(
            [
                "deploy",
                "g2_deploy_flows:greeting",
                "--name",
                "race",
                "--cron",
                "0 2 * * *",
                *argv,
                "--server",
                server_url,
            ]
        )
        out, err = capsys.readouterr()
        return code, out, err

    monkeypatch.setattr(deploy_cmd, "_save_deployment", racing)
    code, out, err = deploy()
    monkeypatch.setattr(deploy_cmd, "_save_deployment", real)
    assert code == 1, err
    assert out == ""
    assert err.startswith("wf: error: invalid_argument: deployment 'greeting.race' belongs to")
    assert "-- stored: artifact greeting v" in err
    assert "; deployment greeting.race (created, revision 1); NOT written: the schedule." in err
    with App.sync(server_url) as app:
        assert app.get_deployment("greeting.race").revision == 1
        assert app.get_schedule("greeting.race")["deployment_id"] == "greeting.rival"

    # Rerun as it was: the read beforehand now sees the rival and writes nothing.
    code, _, err = deploy()
    assert code == 2, err
    assert "belongs to tenant 't2'" in err
    # Fixed (another id): converges, reusing what the first run wrote.
    code, out, err = deploy("--schedule-id", "race-2", "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["artifact"]["action"] == "unchanged"
    assert answer["deployment"] == {
        "deployment_id": "greeting.race",
        "artifact_version": answer["artifact"]["version"],
        "revision": 1,
        "action": "unchanged",
    }
    assert answer["schedule"]["action"] == "created"
