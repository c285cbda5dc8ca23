-- wf store schema, version 3 (PostgreSQL): the runtime catalog.
-- Artifacts are immutable: one row per (artifact_id, version), the plan as its
-- canonical JSON and the sha256 of exactly those bytes. Deployments are
-- mutable under optimistic concurrency: the body (canonical JSON) plus a
-- revision that every save raises by one.

CREATE TABLE artifacts (
    artifact_id  TEXT NOT NULL,
    version      BIGINT NOT NULL CHECK (version >= 1),
    plan         BYTEA NOT NULL,
    content_hash TEXT NOT NULL,
    created_at   DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (artifact_id, version)
);

CREATE TABLE deployments (
    deployment_id TEXT PRIMARY KEY,
    body          BYTEA NOT NULL,
    revision      BIGINT NOT NULL CHECK (revision >= 1),
    updated_at    DOUBLE PRECISION NOT NULL
);
