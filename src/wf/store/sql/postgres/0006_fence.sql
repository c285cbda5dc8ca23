-- wf store schema, version 6 (PostgreSQL only).
-- The write fence. The advisory lock says who is active; this row decides
-- whether a write may commit. `epoch` rises every time a scheduler takes
-- ownership; `commit_seq` rises with every committed write transaction
-- (journal group commits and catalog writes alike). An owner's transaction
-- first calls fence_advance(its epoch, the commit_seq it last saw) inside the
-- same transaction: if anybody took ownership or wrote since, the call raises
-- SQLSTATE WF001 and nothing of the transaction commits. A writer without
-- ownership (tooling, tests) passes NULLs: it only advances `commit_seq`, so
-- an owner that did not see that write is fenced too. The row lock taken by
-- the UPDATE orders every writer's transaction.

CREATE TABLE fence (
    id         SMALLINT PRIMARY KEY CHECK (id = 1),
    epoch      BIGINT NOT NULL CHECK (epoch >= 0),
    commit_seq BIGINT NOT NULL CHECK (commit_seq >= 0)
) WITH (fillfactor = 10);

INSERT INTO fence (id, epoch, commit_seq) VALUES (1, 0, 0);

-- Raises WF001 unless (epoch, commit_seq) are the expected ones (NULL expected
-- epoch: no check); returns the advanced commit_seq.
CREATE FUNCTION fence_advance(expected_epoch BIGINT, expected_seq BIGINT)
RETURNS BIGINT
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    advanced BIGINT;
BEGIN
    UPDATE fence SET commit_seq = commit_seq + 1
    WHERE id = 1
      AND (expected_epoch IS NULL
           OR (epoch = expected_epoch AND commit_seq = expected_seq))
    RETURNING commit_seq INTO advanced;
    IF advanced IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'WF001',
            MESSAGE = 'wf write fence: ownership epoch or commit sequence moved',
            DETAIL = format('expected epoch %s, commit_seq %s', expected_epoch, expected_seq);
    END IF;
    RETURN advanced;
END
$$;
