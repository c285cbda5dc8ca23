-- wf store schema, version 1 (SQLite).
-- Activities keep the submission (msgpack, as accepted) plus the lifecycle
-- columns that every Transition record updates; transitions is append-only.

-- seq is the rowid, so rows lie in creation order and recovery reads them
-- sequentially; activity_id is a unique key beside it.
CREATE TABLE activities (
    seq              INTEGER PRIMARY KEY,
    activity_id      TEXT NOT NULL UNIQUE,
    spec             BLOB NOT NULL,
    state            TEXT NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,
    failures         INTEGER NOT NULL DEFAULT 0,
    infra_requeues   INTEGER NOT NULL DEFAULT 0,
    steals           INTEGER NOT NULL DEFAULT 0,
    token            INTEGER NOT NULL DEFAULT 0,
    worker_id        TEXT,
    lease_expires_at REAL NOT NULL DEFAULT 0,
    not_before       REAL,
    queued_at        REAL NOT NULL DEFAULT 0,
    last_error       TEXT,
    submitted_at     REAL NOT NULL,
    updated_at       REAL NOT NULL
);

-- Recovery reads only unfinished activities, in creation order.
CREATE INDEX activities_live ON activities (seq)
    WHERE state NOT IN ('completed', 'failed', 'cancelled');

CREATE TABLE transitions (
    id               INTEGER PRIMARY KEY,
    activity_id      TEXT NOT NULL,
    at               REAL NOT NULL,
    from_state       TEXT NOT NULL,
    to_state         TEXT NOT NULL,
    reason           TEXT NOT NULL,
    attempt          INTEGER NOT NULL,
    failures         INTEGER NOT NULL,
    infra_requeues   INTEGER NOT NULL,
    steals           INTEGER NOT NULL,
    token            INTEGER NOT NULL,
    worker_id        TEXT,
    lease_expires_at REAL NOT NULL,
    not_before       REAL,
    error            TEXT
);

CREATE INDEX transitions_by_activity ON transitions (activity_id, id);

-- Recovery reads the most recently finished activities in the order they finished.
CREATE INDEX transitions_finished ON transitions (id)
    WHERE to_state IN ('completed', 'failed', 'cancelled');

-- A lease is unique on (activity, fencing token): enforced here, not only in code.
CREATE UNIQUE INDEX leases_unique ON transitions (activity_id, token)
    WHERE to_state = 'leased';

CREATE TABLE workers (
    worker_id     TEXT PRIMARY KEY,
    seq           INTEGER NOT NULL UNIQUE,
    info          BLOB NOT NULL,
    status        TEXT NOT NULL,
    registered_at REAL NOT NULL,
    updated_at    REAL NOT NULL
) WITHOUT ROWID;

-- Retired in issue 14: the core's cron table (WF-005 §18) gave way to deployment
-- schedules (wf.schedules, tables schedules and occurrences). Nothing reads or
-- writes this table any more; rows an older version left here are ignored. It is
-- kept, unused, so that existing stores need no migration for the retirement.
CREATE TABLE crons (
    cron_id      TEXT PRIMARY KEY,
    expression   TEXT NOT NULL,
    timezone     TEXT NOT NULL,
    next_fire_at REAL NOT NULL,
    template     BLOB NOT NULL,
    updated_at   REAL NOT NULL
) WITHOUT ROWID;

-- Counters the core must never reuse: seq, token, worker_seq.
CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO counters (name, value) VALUES ('seq', 0), ('token', 0), ('worker_seq', 0);
