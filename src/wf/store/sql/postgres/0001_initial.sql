-- wf store schema, version 1 (PostgreSQL).
-- Activities keep the submission (msgpack, as accepted) plus the lifecycle
-- columns that every Transition record updates; transitions is append-only.

CREATE TABLE activities (
    activity_id      TEXT PRIMARY KEY,
    seq              BIGINT NOT NULL UNIQUE,
    spec             BYTEA NOT NULL,
    state            TEXT NOT NULL,
    attempt          BIGINT NOT NULL DEFAULT 0,
    failures         BIGINT NOT NULL DEFAULT 0,
    infra_requeues   BIGINT NOT NULL DEFAULT 0,
    steals           BIGINT NOT NULL DEFAULT 0,
    token            BIGINT NOT NULL DEFAULT 0,
    worker_id        TEXT,
    lease_expires_at DOUBLE PRECISION NOT NULL DEFAULT 0,
    not_before       DOUBLE PRECISION,
    queued_at        DOUBLE PRECISION NOT NULL DEFAULT 0,
    last_error       TEXT,
    submitted_at     DOUBLE PRECISION NOT NULL,
    updated_at       DOUBLE PRECISION NOT NULL
);

-- Recovery reads only unfinished activities, in creation order.
CREATE INDEX activities_live ON activities (seq)
    WHERE state NOT IN ('completed', 'failed', 'cancelled');

CREATE TABLE transitions (
    id               BIGSERIAL PRIMARY KEY,
    activity_id      TEXT NOT NULL,
    at               DOUBLE PRECISION NOT NULL,
    from_state       TEXT NOT NULL,
    to_state         TEXT NOT NULL,
    reason           TEXT NOT NULL,
    attempt          BIGINT NOT NULL,
    failures         BIGINT NOT NULL,
    infra_requeues   BIGINT NOT NULL,
    steals           BIGINT NOT NULL,
    token            BIGINT NOT NULL,
    worker_id        TEXT,
    lease_expires_at DOUBLE PRECISION NOT NULL,
    not_before       DOUBLE PRECISION,
    error            TEXT
);

CREATE INDEX transitions_by_activity ON transitions (activity_id, id);

-- Recently finished activities are read in the order they finished.
CREATE INDEX transitions_finished ON transitions (id)
    WHERE to_state IN ('completed', 'failed', 'cancelled');

-- A lease is unique on (activity, fencing token): enforced here, not only in code.
CREATE UNIQUE INDEX leases_unique ON transitions (activity_id, token)
    WHERE to_state = 'leased';

CREATE TABLE workers (
    worker_id     TEXT PRIMARY KEY,
    seq           BIGINT NOT NULL UNIQUE,
    info          BYTEA NOT NULL,
    status        TEXT NOT NULL,
    registered_at DOUBLE PRECISION NOT NULL,
    updated_at    DOUBLE PRECISION NOT NULL
);

-- Retired in issue 14: the core's cron table (WF-005 §18) gave way to deployment
-- schedules (wf.schedules, tables schedules and occurrences). Nothing reads or
-- writes this table any more; rows an older version left here are ignored. It is
-- kept, unused, so that existing stores need no migration for the retirement.
CREATE TABLE crons (
    cron_id      TEXT PRIMARY KEY,
    expression   TEXT NOT NULL,
    timezone     TEXT NOT NULL,
    next_fire_at DOUBLE PRECISION NOT NULL,
    template     BYTEA NOT NULL,
    updated_at   DOUBLE PRECISION NOT NULL
);

-- Counters the core must never reuse: seq, token, worker_seq.
CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);

INSERT INTO counters (name, value) VALUES ('seq', 0), ('token', 0), ('worker_seq', 0);
