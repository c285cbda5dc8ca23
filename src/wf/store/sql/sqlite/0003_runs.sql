-- wf store schema, version 3 (SQLite): workflow runs and activity results.
-- A transition to 'completed' keeps the result its worker reported, so the
-- runtime can read it back after a crash. Runs are the runtime's documents:
-- the body (canonical JSON) plus the columns runs are listed by, mutable under
-- optimistic concurrency (a revision that every update raises by one). A run's
-- number comes from the 'run_seq' counter, raised in the insert's transaction.

ALTER TABLE transitions ADD COLUMN result BLOB;

-- A rowid table, not WITHOUT ROWID: bodies can be large, and seq order is read
-- through the unique index.
CREATE TABLE runs (
    run_id        TEXT PRIMARY KEY,
    seq           INTEGER NOT NULL UNIQUE CHECK (seq >= 1),
    deployment_id TEXT NOT NULL,
    tenant        TEXT NOT NULL,
    status        TEXT NOT NULL,
    schedule_id   TEXT,
    body          BLOB NOT NULL,
    revision      INTEGER NOT NULL CHECK (revision >= 1),
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL
);

-- Recovery reads the live runs in seq order. The status list is RUN_LIVE_STATUSES
-- and must be written exactly as in select_live_runs for the index to be used.
CREATE INDEX runs_live ON runs (seq)
    WHERE status IN ('admitted', 'running', 'interrupted');

CREATE INDEX runs_by_deployment ON runs (deployment_id, seq);

CREATE INDEX runs_by_schedule ON runs (schedule_id, seq);

INSERT INTO counters (name, value) VALUES ('run_seq', 0);
