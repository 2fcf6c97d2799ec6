"""What the overview's search (`GET /v1/status/jobs?q=`) matches: one row of words a job.

The words are a job's id, tenant, queue, schedules (cron, `at`, zone, names), labels and
state (`paused`/`active`), lower-cased, and never the rest of its spec, whose target and
environment may hold secrets (a search would tell whether a secret contains a word).

Computing them for every job at each search cost 4.3 s at a million jobs
(bench/overview_search.py). They are kept in `job_search` instead, by triggers on `jobs`,
so every node keeps them in the same apply that changes the job, snapshots carry them, and
no apply code has to remember them. Claims update only `jobs.watermark_ms`, which the
update trigger does not watch: the hot path pays nothing. The table is derived state and
is not in the digest (state.digest.TABLES).

A database written before the table existed gets it filled when it is opened, and so
does one installed from such a node's snapshot (state.derived). Changing the words means new
trigger names and a refill.
"""

from __future__ import annotations

from raftcron.state.derived import DerivedTable


def searched_words(row: str) -> str:
    """The SQL expression of the words of the `jobs` row named `row` (`new`, `jobs`)."""
    return (
        f"lower({row}.id || ' ' || {row}.tenant || ' ' || {row}.queue || ' ' || "
        f"coalesce(json_extract({row}.spec, '$.schedule.cron'), '') || ' ' || "
        f"coalesce(json_extract({row}.spec, '$.schedule.at'), '') || ' ' || "
        f"coalesce(json_extract({row}.spec, '$.schedule.timezone'), '') || ' ' || "
        f"coalesce(json_extract({row}.spec, '$.schedules'), '') || ' ' || "
        f"coalesce(json_extract({row}.spec, '$.labels'), '') || "
        f"CASE WHEN {row}.paused THEN ' paused' ELSE ' active' END)"
    )


STATEMENTS = (
    "CREATE TABLE IF NOT EXISTS job_search ("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, words TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TRIGGER IF NOT EXISTS job_search_added AFTER INSERT ON jobs BEGIN "
    "INSERT OR REPLACE INTO job_search (id, tenant, words) "
    f"VALUES (new.id, new.tenant, {searched_words('new')}); END",
    "CREATE TRIGGER IF NOT EXISTS job_search_changed "
    "AFTER UPDATE OF id, tenant, queue, spec, paused ON jobs BEGIN "
    "DELETE FROM job_search WHERE id = old.id; "
    "INSERT OR REPLACE INTO job_search (id, tenant, words) "
    f"VALUES (new.id, new.tenant, {searched_words('new')}); END",
    "CREATE TRIGGER IF NOT EXISTS job_search_deleted AFTER DELETE ON jobs BEGIN "
    "DELETE FROM job_search WHERE id = old.id; END",
)


TABLE = DerivedTable(
    "job_search", STATEMENTS,
    "INSERT OR REPLACE INTO job_search (id, tenant, words) "
    f"SELECT id, tenant, {searched_words('jobs')} FROM jobs")
