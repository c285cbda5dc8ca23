-- wf store schema, version 2 (PostgreSQL only).
-- Who holds the ownership advisory lock, so that a refused scheduler can name
-- the holder. The lock itself (session-level, keyed by the schema) is the
-- proof of ownership; this row is only its label. backend_pid lets a reader
-- tell the current holder's row from one a killed owner left behind.

CREATE TABLE owner (
    id          SMALLINT PRIMARY KEY CHECK (id = 1),
    host        TEXT NOT NULL,
    pid         BIGINT NOT NULL,
    since       TEXT NOT NULL,
    backend_pid INTEGER NOT NULL
);
