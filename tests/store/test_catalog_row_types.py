"""Catalog rows read back from either backend become their row types through one
column check (``wf.store.rows.catalog_row``): blobs as bytes, every column of its
field's exact type, else a CorruptRecord naming the table and key."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from wf.errors import CorruptRecord
from wf.runtime.stored import decode_body
from wf.store import rows
from wf.store.protocol import ArtifactRow, OccurrenceRow

T0 = 1_767_225_600.0
RUN = ("run-000001", 1, "art.d", "t1", "admitted", None, b"{}", 2, T0, T0 + 1)


def test_a_blob_read_as_a_memoryview_becomes_bytes() -> None:
    row = ("art", 3, memoryview(b"plan"), "sha256:x", T0)
    assert rows.artifact_from_row(row) == ArtifactRow(
        artifact_id="art", version=3, plan=b"plan", content_hash="sha256:x", created_at=T0
    )


def test_trailing_columns_are_optional_and_nullable_ones_take_none() -> None:
    assert rows.run_from_row(RUN).request_id is None
    assert rows.run_from_row((*RUN, "req-1")).request_id == "req-1"
    assert rows.occurrence_from_row(("s", T0, "admitted", None, None, T0)) == OccurrenceRow(
        schedule_id="s", instant=T0, status="admitted", recorded_at=T0
    )


@pytest.mark.parametrize(
    ("decode", "row", "table", "key"),
    [
        (rows.artifact_from_row, ("art", 3, "not bytes", "h", T0), "artifacts", "art@3"),
        (rows.deployment_from_row, ("art.d", b"{}", "2", T0), "deployments", "art.d"),
        (rows.run_from_row, (*RUN[:8], 5, T0), "runs", "run-000001"),  # int, not float
        (rows.run_from_row, (*RUN, 7), "runs", "run-000001"),  # request_id not a str
        (rows.schedule_from_row, ("s", "t1", "d", True, b"{}", 1, T0, T0), "schedules", "s"),
        (rows.occurrence_from_row, ("s", T0, "admitted", None, None, "x"), "occurrences",
         f"s@{T0}"),
    ],
)  # fmt: skip
def test_a_mistyped_column_is_a_corrupt_record_naming_table_and_key(
    decode: Any, row: tuple[Any, ...], table: str, key: str
) -> None:
    with pytest.raises(CorruptRecord) as caught:
        decode(row)
    assert caught.value.details == {"table": table, "key": key}


def test_a_body_decodes_or_is_a_corrupt_record_naming_table_and_key() -> None:
    decoder = msgspec.json.Decoder(dict[str, int])
    assert decode_body(decoder.decode, b'{"a": 1}', "runs", "run-000001") == {"a": 1}
    with pytest.raises(CorruptRecord, match="stored plan does not decode") as caught:
        decode_body(decoder.decode, b"\xff{", "artifacts", "art@3", "plan")
    assert caught.value.details == {"table": "artifacts", "key": "art@3"}
