-- wf store schema, version 5 (PostgreSQL): deployment schedules and their occurrences.
-- A schedule is the schedules layer's document (body, canonical JSON) plus the
-- columns schedules are listed by, mutable under optimistic concurrency (a
-- revision that every change raises by one). A deleted schedule keeps its row,
-- so its id is never reused. An occurrence is identified by its schedule and its
-- resolved UTC instant: the primary key makes recording one twice impossible.

CREATE TABLE schedules (
    schedule_id   TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    deployment_id TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('active', 'paused', 'deleted')),
    body          BYTEA NOT NULL,
    revision      BIGINT NOT NULL CHECK (revision >= 1),
    created_at    DOUBLE PRECISION NOT NULL,
    updated_at    DOUBLE PRECISION NOT NULL
);

CREATE INDEX schedules_by_status ON schedules (status);

-- Only an admitted occurrence names a run (the one record_occurrences inserted
-- in the same transaction).
CREATE TABLE occurrences (
    schedule_id TEXT NOT NULL REFERENCES schedules (schedule_id),
    instant     DOUBLE PRECISION NOT NULL,
    status      TEXT NOT NULL CHECK (status IN (
                    'admitted', 'coalesced', 'superseded', 'skipped-overlap',
                    'skipped-misfire', 'preflight-rejected')),
    run_id      TEXT REFERENCES runs (run_id),
    detail      TEXT,
    recorded_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (schedule_id, instant),
    CHECK (run_id IS NULL OR status = 'admitted')
);

CREATE INDEX occurrences_by_run ON occurrences (run_id);
