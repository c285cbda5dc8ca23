-- wf store schema, version 8 (PostgreSQL only): the cluster of servers on one store.
-- The fence row names the node that started the current epoch, so that a standby
-- can send clients to it (`not_leader`, docs/ha.md). `cluster_nodes` is where
-- every node reports its role; it is not scheduler state: nodes write it outside
-- the fence (a standby has no epoch), and nothing reads it to decide anything but
-- `cluster.status`. A later partitioned ownership gives each shard a fence row of
-- its own (keyed by shard instead of the single id 1).

ALTER TABLE fence ADD COLUMN owner_node TEXT;
ALTER TABLE fence ADD COLUMN owner_url TEXT;

CREATE TABLE cluster_nodes (
    node_id       TEXT PRIMARY KEY,
    advertise_url TEXT,
    role          TEXT NOT NULL,
    epoch         BIGINT NOT NULL,
    applied_seq   BIGINT NOT NULL,
    host          TEXT NOT NULL,
    pid           BIGINT NOT NULL,
    started_at    TIMESTAMPTZ NOT NULL,
    seen_at       TIMESTAMPTZ NOT NULL
);

-- The change log a standby follows to keep its copy of the scheduler state warm
-- (wf.store.postgres_follow): one row per group commit, written in that commit's
-- own fenced transaction, naming the activities and workers it touched. The
-- active prunes it; a standby whose copy is older than `pruned_below` reloads.
CREATE TABLE change_log (
    commit_seq   BIGINT PRIMARY KEY,
    activity_ids TEXT[] NOT NULL,
    worker_ids   TEXT[] NOT NULL
);

CREATE TABLE change_log_meta (
    id           SMALLINT PRIMARY KEY CHECK (id = 1),
    pruned_below BIGINT NOT NULL
);

INSERT INTO change_log_meta (id, pruned_below) VALUES (1, 0);
