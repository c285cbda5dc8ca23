-- wf store schema, version 9 (PostgreSQL): what attempts leave behind (issue 17).
-- The transition that ends a failed attempt (retried or failed for good) keeps the
-- stack trace its worker reported (bounded free text, at most 16,384 characters),
-- so `runs.inspect` and `wf runs inspect --attempts` can show why it failed.

ALTER TABLE transitions ADD COLUMN stack_trace TEXT;

-- The latest heartbeat details an attempt sent with a lease renewal (at most 64 KiB
-- of JSON), kept with the activity so that its next attempt can resume from them
-- (`scheduler.leases.details`) and `runs.inspect` can show them. Recovery does not
-- read them: the core keeps none.
ALTER TABLE activities ADD COLUMN heartbeat_details BYTEA;
