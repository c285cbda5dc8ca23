-- Named queries shared by both backends. Parameters are written `:name`;
-- the PostgreSQL backend rewrites them to `%(name)s`. Each query starts with
-- `-- name: <name>` and a one-line description.

-- name: insert_activity
-- A newly accepted activity (ActivitySubmitted).
INSERT INTO activities (
    activity_id, seq, spec, state, attempt, failures, infra_requeues, steals, token,
    worker_id, lease_expires_at, not_before, queued_at, last_error, submitted_at, updated_at
) VALUES (
    :activity_id, :seq, :spec, :state, 0, 0, 0, 0, 0,
    NULL, 0, :not_before, 0, NULL, :at, :at
);

-- name: apply_transition
-- Move an activity's lifecycle columns to the state a Transition record describes
-- (or several transitions of one activity in a row, folded: wf.store.codec).
-- :queued_at is the transition's instant when the core enqueued (a steal passes
-- through 'queued' without entering the queue, so it keeps queued_at, as the core
-- does), NULL otherwise.
UPDATE activities SET
    state = :to_state,
    attempt = :attempt,
    failures = :failures,
    infra_requeues = :infra_requeues,
    steals = :steals,
    token = :token,
    worker_id = :held_worker_id,
    lease_expires_at = :held_expires_at,
    not_before = COALESCE(:not_before, not_before),
    queued_at = COALESCE(:queued_at, queued_at),
    last_error = COALESCE(:error, last_error),
    updated_at = :at
WHERE activity_id = :activity_id;

-- name: insert_transition
-- Append one Transition record (with a completion's result or a failed attempt's
-- stack trace) to the audit history.
INSERT INTO transitions (
    activity_id, at, from_state, to_state, reason, attempt, failures, infra_requeues,
    steals, token, worker_id, lease_expires_at, not_before, error, result, stack_trace
) VALUES (
    :activity_id, :at, :from_state, :to_state, :reason, :attempt, :failures, :infra_requeues,
    :steals, :token, :worker_id, :lease_expires_at, :not_before, :error, :result, :stack_trace
);

-- name: renew_lease
-- A lease's new expiry and any heartbeat details sent with it (LeaseRenewed); a
-- stale token updates nothing.
UPDATE activities SET lease_expires_at = :expires_at, updated_at = :at,
    heartbeat_details = COALESCE(:details, heartbeat_details)
WHERE activity_id = :activity_id AND token = :token;

-- name: upsert_worker
-- A worker's registration or status (WorkerUpserted).
INSERT INTO workers (worker_id, seq, info, status, registered_at, updated_at)
VALUES (:worker_id, :seq, :info, :status, :registered_at, :at)
ON CONFLICT (worker_id) DO UPDATE SET
    info = excluded.info,
    status = excluded.status,
    registered_at = excluded.registered_at,
    updated_at = excluded.updated_at;

-- name: delete_worker
-- A departed worker forgotten after its retention (WorkerRemoved).
DELETE FROM workers WHERE worker_id = :worker_id;

-- name: raise_counter
-- Move a counter forward (never backwards).
UPDATE counters SET value = :value WHERE name = :name AND value < :value;

-- name: select_counters
-- Every counter.
SELECT name, value FROM counters;

-- name: select_live_activities
-- Unfinished activities in creation order, for recovery.
SELECT activity_id, seq, spec, state, attempt, failures, infra_requeues, steals, token,
       worker_id, lease_expires_at, not_before, queued_at, last_error, submitted_at
FROM activities
WHERE state NOT IN ('completed', 'failed', 'cancelled')
ORDER BY seq;

-- name: select_recent_finished
-- The most recently finished activities, newest first (in the order they finished).
SELECT activity_id, to_state FROM transitions
WHERE to_state IN ('completed', 'failed', 'cancelled')
ORDER BY id DESC
LIMIT :limit;

-- name: select_workers
-- Every worker in registration order (a departed worker's updated_at is its departure).
SELECT worker_id, seq, info, status, registered_at, updated_at FROM workers ORDER BY seq;

-- name: select_heartbeat_details
-- The latest heartbeat details any attempt of one activity sent (NULL: none).
SELECT heartbeat_details FROM activities WHERE activity_id = :activity_id;

-- name: select_history
-- One activity's transitions, oldest first.
SELECT activity_id, at, from_state, to_state, reason, attempt, failures, infra_requeues,
       steals, token, worker_id, lease_expires_at, not_before, error, result, stack_trace
FROM transitions WHERE activity_id = :activity_id ORDER BY id;

-- name: select_history_page
-- A page of one activity's transitions after a transition id, oldest first, with the id.
SELECT activity_id, at, from_state, to_state, reason, attempt, failures, infra_requeues,
       steals, token, worker_id, lease_expires_at, not_before, error, result, stack_trace, id
FROM transitions WHERE activity_id = :activity_id AND id > :after
ORDER BY id LIMIT :limit;

-- name: check_orphan_transitions
-- Transitions whose activity does not exist.
SELECT t.id, t.activity_id FROM transitions t
LEFT JOIN activities a ON a.activity_id = t.activity_id
WHERE a.activity_id IS NULL;

-- name: check_unknown_lease_holders
-- Held activities whose worker is not registered.
SELECT a.activity_id, a.worker_id FROM activities a
LEFT JOIN workers w ON w.worker_id = a.worker_id
WHERE a.state IN ('leased', 'executing') AND a.worker_id IS NOT NULL
  AND w.worker_id IS NULL;

-- name: check_held_without_worker
-- Held activities with no worker or no token.
SELECT activity_id, state FROM activities
WHERE state IN ('leased', 'executing') AND (worker_id IS NULL OR token = 0);

-- name: check_last_transition_mismatch
-- Activities whose state disagrees with their last transition.
SELECT a.activity_id, a.state, t.to_state FROM activities a
JOIN transitions t ON t.id = (
    SELECT MAX(t2.id) FROM transitions t2 WHERE t2.activity_id = a.activity_id
)
WHERE a.state <> t.to_state;

-- name: check_counters_behind
-- Counters lower than what the rows show (would let a token or seq be reused).
SELECT 'seq' AS name, (SELECT value FROM counters WHERE name = 'seq') AS value,
       (SELECT COALESCE(MAX(seq), 0) FROM activities) AS observed
UNION ALL
SELECT 'token', (SELECT value FROM counters WHERE name = 'token'),
       (SELECT COALESCE(MAX(token), 0) FROM activities)
UNION ALL
SELECT 'worker_seq', (SELECT value FROM counters WHERE name = 'worker_seq'),
       (SELECT COALESCE(MAX(seq), 0) FROM workers)
UNION ALL
SELECT 'run_seq', (SELECT value FROM counters WHERE name = 'run_seq'),
       (SELECT COALESCE(MAX(seq), 0) FROM runs);

-- name: check_lifecycle_without_lease
-- Activities whose lease-driven columns moved although they were never leased (token 0).
SELECT activity_id, state FROM activities
WHERE token = 0
  AND (attempt <> 0 OR failures <> 0 OR infra_requeues <> 0 OR steals <> 0
       OR worker_id IS NOT NULL OR lease_expires_at <> 0 OR last_error IS NOT NULL);

-- name: insert_artifact
-- A new artifact version; an existing (artifact_id, version) is left untouched.
INSERT INTO artifacts (artifact_id, version, plan, content_hash, created_at)
VALUES (:artifact_id, :version, :plan, :content_hash, :created_at)
ON CONFLICT (artifact_id, version) DO NOTHING;

-- name: select_artifact
-- One artifact version.
SELECT artifact_id, version, plan, content_hash, created_at FROM artifacts
WHERE artifact_id = :artifact_id AND version = :version;

-- name: select_latest_artifact
-- An artifact's highest version.
SELECT artifact_id, version, plan, content_hash, created_at FROM artifacts
WHERE artifact_id = :artifact_id ORDER BY version DESC LIMIT 1;

-- name: select_artifact_versions
-- Every version of one artifact, oldest first.
SELECT artifact_id, version, plan, content_hash, created_at FROM artifacts
WHERE artifact_id = :artifact_id ORDER BY version;

-- name: select_artifacts
-- Every artifact version, by id then version.
SELECT artifact_id, version, plan, content_hash, created_at FROM artifacts
ORDER BY artifact_id, version;

-- name: select_artifacts_page
-- A page of artifact versions after (artifact_id, version), by id then version.
SELECT artifact_id, version, plan, content_hash, created_at FROM artifacts
WHERE (artifact_id, version) > (:after_id, :after_version)
ORDER BY artifact_id, version LIMIT :limit;

-- name: select_artifact_versions_page
-- A page of one artifact's versions after a version, oldest first.
SELECT artifact_id, version, plan, content_hash, created_at FROM artifacts
WHERE artifact_id = :artifact_id AND version > :after_version
ORDER BY version LIMIT :limit;

-- name: insert_deployment
-- A deployment's first revision; an existing id is left untouched (a conflict).
INSERT INTO deployments (deployment_id, body, revision, updated_at)
VALUES (:deployment_id, :body, :revision, :updated_at)
ON CONFLICT (deployment_id) DO NOTHING;

-- name: update_deployment
-- A deployment's next revision, only if it is still at the expected one.
UPDATE deployments SET body = :body, revision = :revision, updated_at = :updated_at
WHERE deployment_id = :deployment_id AND revision = :expected_revision;

-- name: select_deployment_revision
-- A deployment's stored revision (why an insert_deployment or update_deployment
-- matched nothing).
SELECT revision FROM deployments WHERE deployment_id = :deployment_id;

-- name: select_deployment
-- One deployment.
SELECT deployment_id, body, revision, updated_at FROM deployments
WHERE deployment_id = :deployment_id;

-- name: select_deployments
-- Every deployment, by id.
SELECT deployment_id, body, revision, updated_at FROM deployments ORDER BY deployment_id;

-- name: select_deployments_page
-- A page of deployments after an id, by id.
SELECT deployment_id, body, revision, updated_at FROM deployments
WHERE deployment_id > :after
ORDER BY deployment_id LIMIT :limit;

-- name: next_run_seq
-- Raise the run counter by one and return it (in insert_run's transaction).
UPDATE counters SET value = value + 1 WHERE name = 'run_seq' RETURNING value;

-- name: insert_run
-- A new run at revision 1 (its seq and run_id come from next_run_seq).
INSERT INTO runs (
    run_id, seq, deployment_id, tenant, status, schedule_id, body, revision,
    created_at, updated_at
) VALUES (
    :run_id, :seq, :deployment_id, :tenant, :status, :schedule_id, :body, 1,
    :created_at, :updated_at
);

-- name: update_run
-- A run's next revision, only if it is still at the expected one (the rest is immutable).
UPDATE runs SET status = :status, body = :body, revision = :revision, updated_at = :updated_at
WHERE run_id = :run_id AND revision = :expected_revision;

-- name: select_run_revision
-- A run's stored revision (why an update_run matched nothing).
SELECT revision FROM runs WHERE run_id = :run_id;

-- name: insert_requested_run
-- A new run started with a client request id; nothing when (tenant, request_id) is
-- taken (the caller then reads that run: a retry answers the same run).
INSERT INTO runs (
    run_id, seq, deployment_id, tenant, status, schedule_id, body, revision,
    created_at, updated_at, request_id
) VALUES (
    :run_id, :seq, :deployment_id, :tenant, :status, :schedule_id, :body, 1,
    :created_at, :updated_at, :request_id
)
ON CONFLICT DO NOTHING;

-- name: select_run_by_request
-- The run a tenant's request id started.
SELECT run_id, seq, deployment_id, tenant, status, schedule_id, body, revision,
       created_at, updated_at, request_id
FROM runs WHERE tenant = :tenant AND request_id = :request_id;

-- name: select_activity_specs
-- Stored submissions by id (a retried submission is compared with them); the ids
-- filter goes in place of the marker.
SELECT activity_id, spec FROM activities WHERE 1 = 1 /* filters */;

-- name: select_run
-- One run.
SELECT run_id, seq, deployment_id, tenant, status, schedule_id, body, revision,
       created_at, updated_at
FROM runs WHERE run_id = :run_id;

-- name: select_runs
-- A page of runs after a seq, oldest first; list_runs puts its filters (fixed column
-- tests, values bound as parameters) in place of the marker.
SELECT run_id, seq, deployment_id, tenant, status, schedule_id, body, revision,
       created_at, updated_at
FROM runs WHERE seq > :after_seq /* filters */
ORDER BY seq LIMIT :limit;

-- name: select_runs_newest
-- A page of runs before a seq, newest first (the operator console's listing); filters
-- as in select_runs.
SELECT run_id, seq, deployment_id, tenant, status, schedule_id, body, revision,
       created_at, updated_at
FROM runs WHERE seq < :before_seq /* filters */
ORDER BY seq DESC LIMIT :limit;

-- name: select_recent_run_statuses
-- The status and creation instant of the newest runs (a bounded scan down the seq
-- index; counts by status are made from it).
SELECT status, created_at
FROM runs WHERE seq > 0 /* filters */
ORDER BY seq DESC LIMIT :limit;

-- name: select_live_runs
-- Runs whose status is live (RUN_LIVE_STATUSES; the list matches the runs_live index).
SELECT run_id, seq, deployment_id, tenant, status, schedule_id, body, revision,
       created_at, updated_at
FROM runs WHERE status IN ('admitted', 'running', 'interrupted')
ORDER BY seq;

-- name: insert_schedule
-- A schedule's first revision; an existing id (deleted ones too) is left untouched.
INSERT INTO schedules (
    schedule_id, tenant, deployment_id, status, body, revision, created_at, updated_at
) VALUES (
    :schedule_id, :tenant, :deployment_id, :status, :body, 1, :created_at, :updated_at
)
ON CONFLICT (schedule_id) DO NOTHING;

-- name: update_schedule
-- A schedule's next revision, only if it is still at the expected one (id, tenant,
-- deployment and created_at are immutable).
UPDATE schedules SET status = :status, body = :body, revision = :revision,
    updated_at = :updated_at
WHERE schedule_id = :schedule_id AND revision = :expected_revision;

-- name: select_schedule_revision
-- A schedule's stored revision (why an update_schedule matched nothing).
SELECT revision FROM schedules WHERE schedule_id = :schedule_id;

-- name: select_schedule
-- One schedule (deleted ones included).
SELECT schedule_id, tenant, deployment_id, status, body, revision, created_at, updated_at
FROM schedules WHERE schedule_id = :schedule_id;

-- name: select_schedules
-- Every schedule that is not deleted, by id.
SELECT schedule_id, tenant, deployment_id, status, body, revision, created_at, updated_at
FROM schedules WHERE status IN ('active', 'paused')
ORDER BY schedule_id;

-- name: select_all_schedules
-- Every schedule, deleted ones included, by id.
SELECT schedule_id, tenant, deployment_id, status, body, revision, created_at, updated_at
FROM schedules ORDER BY schedule_id;

-- name: select_schedules_page
-- A page of schedules after an id, by id; schedules_page puts its filters (fixed column
-- tests, values bound as parameters) in place of the marker.
SELECT schedule_id, tenant, deployment_id, status, body, revision, created_at, updated_at
FROM schedules WHERE schedule_id > :after /* filters */
ORDER BY schedule_id LIMIT :limit;

-- name: insert_occurrence
-- One recorded occurrence; an existing (schedule_id, instant) is left untouched.
INSERT INTO occurrences (schedule_id, instant, status, run_id, detail, recorded_at)
VALUES (:schedule_id, :instant, :status, :run_id, :detail, :recorded_at)
ON CONFLICT (schedule_id, instant) DO NOTHING;

-- name: select_occurrences
-- A page of a schedule's occurrences after an instant, oldest first.
SELECT schedule_id, instant, status, run_id, detail, recorded_at
FROM occurrences WHERE schedule_id = :schedule_id AND instant > :after_instant
ORDER BY instant LIMIT :limit;

-- name: prune_candidate_runs
-- Retention (wf.store.retention): finished runs last written before :cutoff, after a
-- seq, oldest first; never the run of a schedule's latest occurrence. The status list
-- is retention.RUN_FINAL_STATUSES.
SELECT run_id, seq, deployment_id, tenant, status, schedule_id, body, revision,
       created_at, updated_at
FROM runs r
WHERE r.seq > :after_seq
  AND r.status IN ('completed', 'failed', 'exhausted', 'cancelled')
  AND r.updated_at < :cutoff
  AND NOT EXISTS (
      SELECT 1 FROM occurrences o
      WHERE o.run_id = r.run_id
        AND o.instant = (SELECT MAX(m.instant) FROM occurrences m
                         WHERE m.schedule_id = o.schedule_id))
ORDER BY r.seq LIMIT :limit;

-- name: prune_confirm_runs
-- Retention: which of the named runs (filters) are still prunable, inside the deleting
-- transaction (the same tests as prune_candidate_runs).
SELECT run_id FROM runs r
WHERE r.status IN ('completed', 'failed', 'exhausted', 'cancelled')
  AND r.updated_at < :cutoff
  AND NOT EXISTS (
      SELECT 1 FROM occurrences o
      WHERE o.run_id = r.run_id
        AND o.instant = (SELECT MAX(m.instant) FROM occurrences m
                         WHERE m.schedule_id = o.schedule_id)) /* filters */;

-- name: prune_live_activities
-- Retention: which of the named activities (filters) are not finished (their run is kept).
SELECT activity_id FROM activities
WHERE state NOT IN ('completed', 'failed', 'cancelled') /* filters */;

-- name: prune_candidate_activities
-- Retention: finished activities last changed before :cutoff, after a seq, oldest first.
SELECT seq, activity_id FROM activities
WHERE seq > :after_seq AND state IN ('completed', 'failed', 'cancelled')
  AND updated_at < :cutoff
ORDER BY seq LIMIT :limit;

-- name: prune_confirm_activities
-- Retention: which of the named activities (filters) are still finished before :cutoff.
SELECT activity_id FROM activities
WHERE state IN ('completed', 'failed', 'cancelled') AND updated_at < :cutoff /* filters */;

-- name: prune_existing_runs
-- Retention: which of the named runs (filters) exist.
SELECT run_id FROM runs WHERE 1 = 1 /* filters */;

-- name: prune_count_transitions
-- Retention (dry run): the transitions of the named activities (filters).
SELECT COUNT(*) FROM transitions WHERE 1 = 1 /* filters */;

-- name: prune_delete_transitions
-- Retention: the transitions of the named activities (filters).
DELETE FROM transitions WHERE 1 = 1 /* filters */;

-- name: prune_delete_activities
-- Retention: the named activities (filters), finished ones only.
DELETE FROM activities WHERE state IN ('completed', 'failed', 'cancelled') /* filters */;

-- name: prune_delete_run_occurrences
-- Retention: the occurrences that admitted the named runs (filters).
DELETE FROM occurrences WHERE 1 = 1 /* filters */;

-- name: prune_delete_runs
-- Retention: the named runs (filters), confirmed prunable in the same transaction.
DELETE FROM runs WHERE 1 = 1 /* filters */;

-- name: prune_candidate_occurrences
-- Retention: occurrences recorded before :cutoff after a (schedule, instant) key, in key
-- order; never a schedule's latest one, nor one whose run is still stored.
SELECT o.schedule_id, o.instant FROM occurrences o
WHERE (o.schedule_id > :after_schedule
       OR (o.schedule_id = :after_schedule AND o.instant > :after_instant))
  AND o.recorded_at < :cutoff
  AND o.instant < (SELECT MAX(m.instant) FROM occurrences m
                   WHERE m.schedule_id = o.schedule_id)
  AND (o.run_id IS NULL
       OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = o.run_id))
ORDER BY o.schedule_id, o.instant LIMIT :limit;

-- name: prune_delete_occurrences
-- Retention: one schedule's prunable occurrences between two instants (the tests of
-- prune_candidate_occurrences, checked again in the deleting transaction).
DELETE FROM occurrences
WHERE schedule_id = :schedule_id AND instant >= :low AND instant <= :high
  AND recorded_at < :cutoff
  AND instant < (SELECT MAX(m.instant) FROM occurrences m
                 WHERE m.schedule_id = :schedule_id)
  AND (run_id IS NULL
       OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = occurrences.run_id));

-- name: prune_count_run_occurrences
-- Retention (dry run): the occurrences that admitted the named runs (filters).
SELECT COUNT(*) FROM occurrences WHERE 1 = 1 /* filters */;
