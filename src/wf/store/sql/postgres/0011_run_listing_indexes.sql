-- wf store schema, version 11 (PostgreSQL): run listings served by an index (issue 18).
-- The console and `wf runs list` page runs newest first (ORDER BY seq DESC LIMIT n).
-- A status filter ('failed') or a tenant-scoped credential used to walk the seq index
-- row by row until a page was full: all 10^5 runs of a store when the status or the
-- tenant is rare. With these, either filter is a range of its own index in seq order,
-- as deployment and schedule filters already were (runs_by_deployment,
-- runs_by_schedule); workflow.runs.counts for a tenant reads that tenant's rows only.

CREATE INDEX runs_by_status ON runs (status, seq);

CREATE INDEX runs_by_tenant ON runs (tenant, seq);
