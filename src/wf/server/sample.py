"""The sample ``wf-rpc-server --sample`` installs: something to watch without writing code.

Theory of operation
-------------------
:func:`install_sample` puts, through the server's own Python API and as the
local administrator, a small scheduled workflow into the store:

- artifact ``hello_schedule`` v1: ``format_text`` ("hello {name} from a
  schedule") then ``upper``, output ``{"result": ...}``; both activities are
  built in (:data:`wf.activities.BUILTIN_ACTIVITIES`), so the server's
  in-process workers run them;
- deployment ``hello_schedule.default`` with default inputs ``{"name": "world"}``
  (a run's output is ``{"result": "HELLO WORLD FROM A SCHEDULE"}``);
- cron schedule ``hello-every-minute`` (``* * * * *``, UTC): the ongoing
  stream, one run at the top of every minute;
- a one-shot schedule :data:`ONESHOT_DELAY_S` seconds after the start, so the
  first run happens within seconds rather than at the next minute.

It is idempotent over an existing store: what is already there is left
alone (the artifact is immutable; a deployment or the cron schedule the
operator changed stays as they left it; a deleted cron schedule stays
deleted, since schedule ids are never reused). Schedule ids are never reused
either, so every start creates a *fresh* one-shot: ``hello-soon`` on a new
store, then ``hello-soon-2``, ``hello-soon-3``, ... The ids are in the
:class:`SampleReport` (``wf-rpc-server`` prints it).

Every server (not only the sample) logs one line when a run is admitted
(``run.admitted``) and one when it reaches a final status (``run.completed``,
``run.failed``, ``run.exhausted``, ``run.cancelled``): see
:mod:`wf.server.run_signals` (``RunProgressLogger`` is re-exported here).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from wf.errors import Conflict, NotFound
from wf.server.app import WfServer
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.server.run_signals import RunProgressLogger

__all__ = ["RunProgressLogger", "SampleReport", "install_sample"]

ARTIFACT_ID: Final = "hello_schedule"
"""The sample artifact."""
ARTIFACT_VERSION: Final = 1
DEPLOYMENT_ID: Final = f"{ARTIFACT_ID}.default"
"""The sample deployment."""
CRON_SCHEDULE_ID: Final = "hello-every-minute"
"""The sample's cron schedule (every minute, UTC)."""
CRON_EXPRESSION: Final = "* * * * *"
ONESHOT_PREFIX: Final = "hello-soon"
"""The one-shot schedules: ``hello-soon``, then ``hello-soon-2``, ..."""
ONESHOT_DELAY_S: Final = 5.0
"""How long after the start the fresh one-shot fires."""
DEFAULT_INPUTS: Final[dict[str, Any]] = {"name": "world"}

PLAN: Final[dict[str, Any]] = {
    "input_schema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    },
    "nodes": [
        {
            "kind": "activity",
            "id": "greet",
            "activity_type": "format_text",
            "args": {"template": "hello {name} from a schedule", "name": {"$input": "name"}},
            "idempotent": True,
        },
        {
            "kind": "activity",
            "id": "shout",
            "activity_type": "upper",
            "needs": ["greet"],
            "args": {"text": {"$node": "greet", "path": "text"}},
            "idempotent": True,
        },
    ],
    "output": {"result": {"$node": "shout", "path": "text"}},
}
"""The sample plan: two built-in activities in a row."""

EXPECTED_OUTPUT: Final[dict[str, Any]] = {"result": "HELLO WORLD FROM A SCHEDULE"}
"""The output of a sample run with the default inputs."""

log = logging.getLogger("wf.sample")


@dataclass(frozen=True, slots=True)
class SampleReport:
    """What :func:`install_sample` did."""

    created: list[str] = field(default_factory=list)
    """What it created (``artifact hello_schedule v1``, ``schedule hello-soon``, ...)."""
    existing: list[str] = field(default_factory=list)
    """What was already there and was left alone."""
    oneshot_id: str = ""
    """This start's one-shot schedule."""
    oneshot_at: str = ""
    """When it fires (ISO 8601, UTC)."""
    cron_id: str = CRON_SCHEDULE_ID
    """The cron schedule (``""`` if it was deleted: ids are never reused)."""

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "artifact": f"{ARTIFACT_ID} v{ARTIFACT_VERSION}",
            "deployment": DEPLOYMENT_ID,
            "cron_schedule": self.cron_id or None,
            "oneshot_schedule": self.oneshot_id,
            "oneshot_at": self.oneshot_at,
            "created": list(self.created),
            "existing": list(self.existing),
        }


async def install_sample(server: WfServer, *, delay_s: float = ONESHOT_DELAY_S) -> SampleReport:
    """Install the sample into a started server (see the module docstring).

    Conflict if the server keeps no deployment schedules (it must be built with
    the scheduler enabled for the schedules to fire).
    """
    schedules = server.schedules
    if schedules is None:
        raise Conflict("the sample needs deployment schedules: enable the scheduler")
    workflow = server.workflow
    created: list[str] = []
    existing: list[str] = []
    try:
        await workflow.get_artifact(ARTIFACT_ID, ARTIFACT_VERSION, caller=ANONYMOUS_ADMIN)
        existing.append(f"artifact {ARTIFACT_ID} v{ARTIFACT_VERSION}")
    except NotFound:
        await workflow.create_artifact_from_plan(
            ARTIFACT_ID, ARTIFACT_VERSION, PLAN, caller=ANONYMOUS_ADMIN
        )
        created.append(f"artifact {ARTIFACT_ID} v{ARTIFACT_VERSION}")
    try:
        await workflow.get_deployment(DEPLOYMENT_ID, caller=ANONYMOUS_ADMIN)
        existing.append(f"deployment {DEPLOYMENT_ID}")
    except NotFound:
        await workflow.save_deployment(
            {
                "artifact_id": ARTIFACT_ID,
                "artifact_version": ARTIFACT_VERSION,
                "name": "default",
                "default_inputs": DEFAULT_INPUTS,
                "max_steps": 10,
                "run_deadline_s": 600.0,
            },
            expected_revision=0,
            caller=ANONYMOUS_ADMIN,
        )
        created.append(f"deployment {DEPLOYMENT_ID}")

    used: set[str] = set()
    cursor: str | None = None
    while True:  # every page: the listing is paged
        page = await schedules.list_schedules(
            caller=ANONYMOUS_ADMIN, include_deleted=True, limit=100, cursor=cursor
        )
        used.update(s.schedule_id for s in page.schedules)
        cursor = page.next_cursor
        if cursor is None:
            break
    cron_id = CRON_SCHEDULE_ID
    if cron_id not in used:
        await schedules.create_schedule(
            cron_id,
            DEPLOYMENT_ID,
            {"kind": "cron", "expression": CRON_EXPRESSION, "timezone": "UTC"},
            caller=ANONYMOUS_ADMIN,
            note="wf-rpc-server --sample: one run every minute",
        )
        created.append(f"schedule {cron_id}")
    else:
        cron = await schedules.get_schedule(cron_id, caller=ANONYMOUS_ADMIN)
        if cron.deleted:
            cron_id = ""
        else:
            existing.append(f"schedule {cron_id}")

    oneshot_id = ONESHOT_PREFIX
    number = 1
    while oneshot_id in used:
        number += 1
        oneshot_id = f"{ONESHOT_PREFIX}-{number}"
    # A whole second, so the instant reads the same in every listing.
    at = datetime.fromtimestamp(math.ceil(server.node.clock.now() + delay_s), UTC)
    await schedules.create_schedule(
        oneshot_id,
        DEPLOYMENT_ID,
        {"kind": "oneshot", "at": at.isoformat()},
        caller=ANONYMOUS_ADMIN,
        note=f"wf-rpc-server --sample: one run {delay_s:g} s after the start",
    )
    created.append(f"schedule {oneshot_id}")
    return SampleReport(
        created=created,
        existing=existing,
        oneshot_id=oneshot_id,
        oneshot_at=at.isoformat(timespec="seconds").replace("+00:00", "Z"),
        cron_id=cron_id,
    )
