"""``wf deploy``'s artifact step against a scripted client: a version that another
deploy takes first between the read and the create makes this deploy read again
and take the next one, and a stored version holding the same plan is reused
whatever its number."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from wf import flow
from wf.activities import upper
from wf.cli.deploy_cmd import _publish
from wf.errors import AlreadyExists
from wf.runtime.artifacts import Artifact
from wf.wire.workflow import ArtifactPage


@flow.workflow("steps")
def steps() -> flow.Outputs:
    flow.call(upper, text="x")
    return None


@flow.workflow("steps")
def steps_edited() -> flow.Outputs:
    flow.call(upper, text="y")
    return None


class ScriptedApp:
    """The calls ``_publish`` makes, on an in-memory catalog; ``steal`` versions are
    created by "another deploy" just before this one's create."""

    def __init__(self, stored: list[flow.Flow], steal: int = 0) -> None:
        self.versions: dict[int, str] = {i + 1: f.content_hash for i, f in enumerate(stored)}
        self.steal = steal
        self.creates: list[int] = []

    def run(self, call: Callable[[Any], Awaitable[Any]]) -> Any:
        return asyncio.run(call(self))

    async def list_artifacts(
        self, artifact_id: str, *, limit: int, cursor: str | None
    ) -> ArtifactPage:
        items = sorted(self.versions.items())
        start = int(cursor or 0)
        page = items[start : start + 1]  # one per page: the paging is exercised too
        nxt = str(start + 1) if start + 1 < len(items) else None
        return ArtifactPage(
            artifacts=[
                Artifact(
                    artifact_id=artifact_id,
                    version=v,
                    plan=steps.plan,
                    content_hash=h,
                    created_at=0.0,
                )
                for v, h in page
            ],
            next_cursor=nxt,
        )

    async def create_artifact_from_plan(
        self, artifact_id: str, version: int, plan: dict[str, Any]
    ) -> Artifact:
        self.creates.append(version)
        if self.steal:
            self.steal -= 1
            self.versions[version] = f"sha256:other-{version}"
            raise AlreadyExists(f"{artifact_id} v{version} exists")
        self.versions[version] = steps_edited.content_hash
        return Artifact(
            artifact_id=artifact_id,
            version=version,
            plan=steps_edited.plan,
            content_hash=steps_edited.content_hash,
            created_at=0.0,
        )


def test_a_version_taken_concurrently_is_skipped() -> None:
    app = ScriptedApp([steps], steal=2)
    step = _publish(app, steps_edited)  # type: ignore[arg-type]
    assert app.creates == [2, 3, 4]
    assert step == {
        "version": 4,
        "content_hash": steps_edited.content_hash,
        "action": "created",
    }


def test_a_stored_version_with_the_same_plan_is_reused() -> None:
    app = ScriptedApp([steps, steps_edited, steps])
    step = _publish(app, steps_edited)  # type: ignore[arg-type]
    assert app.creates == []
    assert step == {"version": 2, "content_hash": steps_edited.content_hash, "action": "unchanged"}
