-- wf store schema, version 7 (SQLite): client request ids of runs (issue 15).
-- A client that retries `workflow.runs.start` or `workflow.schedules.trigger` (its
-- answer was lost, or the server failed over) names the same request id, and the
-- retry finds the run the first call started instead of starting a second one. The
-- id is stored with the run, in the transaction that creates it, and is unique per
-- tenant; runs started without one (every scheduled run) leave it NULL.
-- (Versions 5 and 6 are PostgreSQL's own: its owner and fence tables.)

ALTER TABLE runs ADD COLUMN request_id TEXT;

CREATE UNIQUE INDEX runs_by_request ON runs (tenant, request_id)
    WHERE request_id IS NOT NULL;
