"""Each tenant's jobs and schedules, counted as jobs change: what the `max_jobs` and
`max_schedules` quotas compare against.

Counting them when a command creates jobs read the tenant's whole index: 0.3-0.5 s at a
million jobs, inside the apply of every batch-create entry, on the Raft thread, long
enough for the followers to call an election. `tenant_usage` keeps the counts instead, by
triggers on `jobs`, so every node changes them in the apply that changes the job, and
snapshots carry them. Claims update only `jobs.watermark_ms`, which no trigger watches.
It is derived state and not in the digest (state.digest.TABLES).

A job's schedules are one, or the length of its `schedules` list
(core.tenant_policy.schedule_count); the table keeps the schedules beyond one per job
(`extra`), so a tenant's schedules are `jobs + extra`.

A database written before the table existed gets it filled when it is opened, and so
does one installed from such a node's snapshot (state.derived).
"""

from __future__ import annotations

from raftcron.state.derived import DerivedTable


def _extra(row: str) -> str:
    """The SQL of the schedules beyond one that the `jobs` row named `row` holds."""
    return (f"(CASE WHEN json_type({row}.spec, '$.schedules') = 'array' THEN "
            f"max(1, json_array_length({row}.spec, '$.schedules')) - 1 ELSE 0 END)")


def _add(row: str, sign: str) -> str:
    return ("INSERT INTO tenant_usage (tenant, jobs, extra) "
            f"VALUES ({row}.tenant, {sign}1, {sign}{_extra(row)}) "
            "ON CONFLICT (tenant) DO UPDATE SET jobs = jobs + excluded.jobs, "
            "extra = extra + excluded.extra;")


STATEMENTS = (
    # What the quotas counted from before the table (jobs with several schedules).
    "DROP INDEX IF EXISTS jobs_multi_schedule",
    "CREATE TABLE IF NOT EXISTS tenant_usage ("
    " tenant TEXT PRIMARY KEY, jobs INTEGER NOT NULL, extra INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TRIGGER IF NOT EXISTS tenant_usage_added AFTER INSERT ON jobs BEGIN "
    f"{_add('new', '+')} END",
    "CREATE TRIGGER IF NOT EXISTS tenant_usage_changed AFTER UPDATE OF tenant, spec ON jobs "
    f"BEGIN {_add('old', '-')} {_add('new', '+')} END",
    "CREATE TRIGGER IF NOT EXISTS tenant_usage_deleted AFTER DELETE ON jobs BEGIN "
    f"{_add('old', '-')} END",
)

# (jobs, schedules) of tenant ?1; (0, 0) for a tenant without jobs.
USAGE_SQL = ("SELECT coalesce(max(jobs), 0), coalesce(max(jobs + extra), 0) "
             "FROM tenant_usage WHERE tenant = ?1")


TABLE = DerivedTable(
    "tenant_usage", STATEMENTS,
    "INSERT INTO tenant_usage (tenant, jobs, extra) "
    f"SELECT tenant, count(*), sum({_extra('jobs')}) FROM jobs GROUP BY tenant")
