-- wf store schema, version 4 (SQLite): deployment schedules and their occurrences.
-- A schedule is the schedules layer's document (body, canonical JSON) plus the
-- columns schedules are listed by, mutable under optimistic concurrency (a
-- revision that every change raises by one). A deleted schedule keeps its row,
-- so its id is never reused. An occurrence is identified by its schedule and its
-- resolved UTC instant: the primary key makes recording one twice impossible.
-- The store opens every connection with PRAGMA foreign_keys=ON, so the
-- references below are enforced.

CREATE TABLE schedules (
    schedule_id   TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    deployment_id TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('active', 'paused', 'deleted')),
    body          BLOB NOT NULL,
    revision      INTEGER NOT NULL CHECK (revision >= 1),
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL
);

CREATE INDEX schedules_by_status ON schedules (status);

-- Only an admitted occurrence names a run (the one record_occurrences inserted
-- in the same transaction).
CREATE TABLE occurrences (
    schedule_id TEXT NOT NULL REFERENCES schedules (schedule_id),
    instant     REAL NOT NULL,
    status      TEXT NOT NULL CHECK (status IN (
                    'admitted', 'coalesced', 'superseded', 'skipped-overlap',
                    'skipped-misfire', 'preflight-rejected')),
    run_id      TEXT REFERENCES runs (run_id),
    detail      TEXT,
    recorded_at REAL NOT NULL,
    PRIMARY KEY (schedule_id, instant),
    CHECK (run_id IS NULL OR status = 'admitted')
) WITHOUT ROWID;

CREATE INDEX occurrences_by_run ON occurrences (run_id);
