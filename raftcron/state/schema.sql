-- The replicated state. Every table here is logical state: equal on every node that
-- applied the same log index (see state.digest). Times are UTC epoch milliseconds.

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS epochs (
    epoch     INTEGER PRIMARY KEY,
    node_id   TEXT NOT NULL,
    began_ms  INTEGER NOT NULL,
    log_index INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS jobs (
    id           TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    version      INTEGER NOT NULL,
    spec         TEXT NOT NULL,
    paused       INTEGER NOT NULL,
    queue        TEXT NOT NULL,
    watermark_ms INTEGER NOT NULL,
    created_ms   INTEGER NOT NULL,
    updated_ms   INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS jobs_tenant ON jobs (tenant, id);
-- The deadline watcher's scan (leader.deadlines.JOBS_SQL, every second) reads only these.
CREATE INDEX IF NOT EXISTS jobs_deadline ON jobs (id)
    WHERE json_extract(spec, '$.deadline_s') IS NOT NULL;
-- ... and the start deadlines' scan.
CREATE INDEX IF NOT EXISTS jobs_start_deadline ON jobs (id)
    WHERE json_extract(spec, '$.start_deadline_s') IS NOT NULL;
-- The chained jobs, by the job they follow (state.chains, on every ended run).
CREATE INDEX IF NOT EXISTS jobs_after ON jobs (json_extract(spec, '$.after.job'))
    WHERE json_extract(spec, '$.after') IS NOT NULL;

CREATE TABLE IF NOT EXISTS occurrences (
    id               TEXT PRIMARY KEY,
    job_id           TEXT NOT NULL,
    tenant           TEXT NOT NULL,
    queue            TEXT NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('scheduled', 'manual', 'backfill')),
    scheduled_for_ms INTEGER NOT NULL,
    dispatch_at_ms   INTEGER NOT NULL,
    job_version      INTEGER NOT NULL,
    status           TEXT NOT NULL,
    reason           TEXT,
    idempotency_key  TEXT,
    request_key      TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0,
    epoch            INTEGER NOT NULL,
    created_ms       INTEGER NOT NULL,
    finished_ms      INTEGER,
    -- The names of the schedules that named this instant, a JSON list, for a job with
    -- several (NULL for a job with one). Added later: see db.COLUMN_MIGRATIONS
    schedules        TEXT,
    -- A chained job's run (core.chains): the upstream occurrence that started it and how
    -- that ended (succeeded or failed); NULL for every other run. Added later (db.
    -- COLUMN_MIGRATIONS); its UNIQUE index (db.MIGRATED_INDEXES) is one run per upstream.
    upstream         TEXT,
    upstream_outcome TEXT
);
-- Index shapes follow the write path: a claim inserts one row per job of a herd, all at
-- about the same instant. An index led by job id takes those rows at a thousand places
-- across its whole history, and every commit rewrites each page it touched; an index led
-- by time takes them at its end. So history is kept in time-led indexes, and only the
-- primary key is led by job: an occurrence id is `<job>@<...>`, so the ids of one job are
-- one contiguous range of it (core.identity.job_occurrences), and per-job reads use that.
--
-- Invariant 1: at most one scheduled occurrence per (job, instant), decided here.
CREATE UNIQUE INDEX IF NOT EXISTS occ_scheduled_time
    ON occurrences (scheduled_for_ms, job_id) WHERE kind = 'scheduled';
CREATE UNIQUE INDEX IF NOT EXISTS occ_manual
    ON occurrences (job_id, idempotency_key) WHERE kind = 'manual';
CREATE UNIQUE INDEX IF NOT EXISTS occ_backfill
    ON occurrences (job_id, scheduled_for_ms, request_key) WHERE kind = 'backfill';
-- Led by status, then time: a new row and a status change both land at the end of a
-- status's section.
CREATE INDEX IF NOT EXISTS occ_status_time ON occurrences (status, scheduled_for_ms);
CREATE INDEX IF NOT EXISTS occ_finished ON occurrences (finished_ms) WHERE finished_ms IS NOT NULL;
-- Replaced by the indexes above (databases written by earlier versions).
DROP INDEX IF EXISTS occ_scheduled;
DROP INDEX IF EXISTS occ_job_time;

CREATE TABLE IF NOT EXISTS attempts (
    id                  TEXT PRIMARY KEY,
    occurrence_id       TEXT NOT NULL,
    job_id              TEXT NOT NULL,
    tenant              TEXT NOT NULL,
    queue               TEXT NOT NULL,
    number              INTEGER NOT NULL,
    status              TEXT NOT NULL,
    not_before_ms       INTEGER NOT NULL,
    worker_id           TEXT,
    fencing_token       INTEGER,
    leased_ms           INTEGER,
    heartbeat_ms        INTEGER,
    lease_expires_ms    INTEGER,
    runtime_deadline_ms INTEGER,
    cancel_requested    INTEGER NOT NULL DEFAULT 0,
    created_ms          INTEGER NOT NULL,
    finished_ms         INTEGER,
    exit_code           INTEGER,
    output              TEXT,
    error               TEXT,
    -- Explicit delivery (added later: state.db.COLUMN_MIGRATIONS adds these to older
    -- databases, at the end, so old and new databases have the same column order).
    -- ack_deadline_ms: a lease the worker promised to acknowledge and has not yet; NULL
    -- once acknowledged, and for every lease granted without the promise (or before it
    -- existed), which is then treated as delivered, as before.
    ack_deadline_ms     INTEGER,
    acked_ms            INTEGER,
    -- leases of this attempt released because no acknowledgement came (not counted as
    -- attempts), and why the last release happened
    unacked_releases    INTEGER NOT NULL DEFAULT 0,
    release_reason      TEXT,
    -- when the job's process started, as its worker reported it on the cluster's clock
    -- (never before not_before_ms); NULL for attempts whose worker reported no start.
    -- finished_ms is then that start plus the duration the worker measured.
    started_ms          INTEGER
);
-- Invariant 3: a fencing token is handed out once, ever.
CREATE UNIQUE INDEX IF NOT EXISTS att_token ON attempts (fencing_token)
    WHERE fencing_token IS NOT NULL;
CREATE INDEX IF NOT EXISTS att_pending ON attempts (queue, not_before_ms) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS att_running ON attempts (lease_expires_ms) WHERE status = 'running';
-- A job's live attempts (overlap, replace, pause); an occurrence's attempts are the id
-- range `<occurrence id>~` (core.identity.occurrence_attempts).
CREATE INDEX IF NOT EXISTS att_job_pending ON attempts (job_id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS att_job_running ON attempts (job_id) WHERE status = 'running';
-- A tenant's pending runs (the max_pending_runs quota, state.tenants.PENDING_SQL).
CREATE INDEX IF NOT EXISTS att_tenant_pending ON attempts (tenant) WHERE status = 'pending';
DROP INDEX IF EXISTS att_job_status;
DROP INDEX IF EXISTS att_occurrence;

CREATE TABLE IF NOT EXISTS requests (
    request_id TEXT PRIMARY KEY,
    result     TEXT NOT NULL,
    applied_ms INTEGER NOT NULL
) WITHOUT ROWID;

-- acked_*: set by a person's acknowledgement (alert_actions), cleared when raised again;
-- an older database gets these columns from db.add_missing_columns.
CREATE TABLE IF NOT EXISTS alerts (
    id            TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    job_id        TEXT,
    occurrence_id TEXT,
    reason        TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('open', 'resolved')),
    raised_ms     INTEGER NOT NULL,
    resolved_ms   INTEGER,
    acked_ms      INTEGER,
    acked_by      TEXT,
    ack_note      TEXT,
    -- "cluster_unavailable" when the cluster's own trouble explains a deadline alert
    -- (state.availability); NULL otherwise. Added later (db.COLUMN_MIGRATIONS).
    cause         TEXT
);
-- Open alerts of one job (run bounds resolve them on the job's next good run).
CREATE INDEX IF NOT EXISTS alerts_open_job ON alerts (job_id, kind) WHERE status = 'open';

CREATE TABLE IF NOT EXISTS outbox (
    id           INTEGER PRIMARY KEY,
    event        TEXT NOT NULL,
    payload      TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('pending', 'delivered')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    created_ms   INTEGER NOT NULL,
    delivered_ms INTEGER
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (id) WHERE status = 'pending';

-- Every raise and resolve of an alert, in log order (GET /v1/alerts shows this history;
-- the alerts row holds only the latest state).
CREATE TABLE IF NOT EXISTS alert_events (
    id               INTEGER PRIMARY KEY,
    alert_id         TEXT NOT NULL,
    event            TEXT NOT NULL CHECK (event IN ('raised', 'resolved')),
    reason           TEXT,
    scheduled_for_ms INTEGER,
    message          TEXT,
    at_ms            INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS alert_events_alert ON alert_events (alert_id, id);

-- What people did to an alert by hand (POST /v1/alerts/{id}/ack and /resolve): who, when
-- and their note. GET /v1/alerts merges these into the alert's history by time.
CREATE TABLE IF NOT EXISTS alert_actions (
    id        INTEGER PRIMARY KEY,
    alert_id  TEXT NOT NULL,
    action    TEXT NOT NULL CHECK (action IN ('acknowledged', 'resolved')),
    who       TEXT NOT NULL,
    note      TEXT NOT NULL,
    at_ms     INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS alert_actions_alert ON alert_actions (alert_id, id);

-- Per-tenant quotas (NULL: unlimited) and the fires counted against them per minute.
-- queues / targets / http_hosts: the tenant policy, JSON lists (NULL: any); an older
-- database gets these columns from db.add_missing_columns.
-- The last two quotas were added later (db.COLUMN_MIGRATIONS). NULL in them, and in
-- max_jobs, is the quota's default (core.tenant_policy.QUOTA_DEFAULTS).
CREATE TABLE IF NOT EXISTS tenants (
    name                 TEXT PRIMARY KEY,
    max_jobs             INTEGER,
    max_concurrent_runs  INTEGER,
    max_fires_per_minute INTEGER,
    updated_ms           INTEGER NOT NULL,
    queues               TEXT,
    targets              TEXT,
    http_hosts           TEXT,
    max_schedules        INTEGER,
    max_pending_runs     INTEGER
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS tenant_fires (
    tenant TEXT NOT NULL,
    minute INTEGER NOT NULL,
    fires  INTEGER NOT NULL,
    PRIMARY KEY (tenant, minute)
) WITHOUT ROWID;

-- Cluster membership records (cluster.membership): the topology pysyncobj's snapshots
-- would otherwise override, plus each member's HTTP URL.
CREATE TABLE IF NOT EXISTS cluster_members (
    id            TEXT PRIMARY KEY,
    raft_addr     TEXT NOT NULL,
    http_url      TEXT NOT NULL,
    removed       INTEGER NOT NULL DEFAULT 0,
    updated_index INTEGER NOT NULL
) WITHOUT ROWID;

-- Webhook delivery state per (outbox row, receiver): a receiver that fails backs off and is
-- eventually given up on (`dead`) for that row alone; the other receivers of the row, and
-- later rows, are not held back by it. The outbox row is `delivered` (finished) once none
-- of its deliveries is pending. Rows written before this table existed have no deliveries
-- yet: the leader routes them like new rows (leader.outbox).
CREATE TABLE IF NOT EXISTS outbox_deliveries (
    outbox_id  INTEGER NOT NULL,
    receiver   TEXT NOT NULL,
    signer     TEXT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts   INTEGER NOT NULL DEFAULT 0,
    next_ms    INTEGER NOT NULL,
    first_ms   INTEGER NOT NULL,
    last_error TEXT,
    updated_ms INTEGER NOT NULL,
    -- A delivery to a muted channel: the end of the mute window it was held for (its
    -- next_ms until then; sent in one summary with the others held to that instant).
    -- NULL for every other delivery. Added later (db.COLUMN_MIGRATIONS).
    held_ms    INTEGER,
    PRIMARY KEY (outbox_id, receiver)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS outbox_deliveries_due
    ON outbox_deliveries (next_ms, receiver) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS outbox_deliveries_dead
    ON outbox_deliveries (outbox_id, receiver) WHERE status = 'dead';

-- Webhook signing keys: owner "cluster" (generated by the first node to start, unless
-- receivers use webhook_secret_file) and "tenant:<name>" (set by a rotation; a tenant
-- without one signs with a key derived from the cluster key, see leader.webhook_keys).
CREATE TABLE IF NOT EXISTS webhook_keys (
    owner      TEXT PRIMARY KEY,
    key        TEXT NOT NULL,
    updated_ms INTEGER NOT NULL
) WITHOUT ROWID;

-- Calendars (core.calendar): named sets of excluded instants a job may list. `spec` is
-- the canonical JSON of the calendar; a job names only calendars of its own tenant, and
-- a calendar a job names cannot be deleted (state.calendars).
CREATE TABLE IF NOT EXISTS calendars (
    name       TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    spec       TEXT NOT NULL,
    updated_ms INTEGER NOT NULL
) WITHOUT ROWID;

-- The last bulk pause or resume that reached each job (POST /v1/jobs:pause, :resume):
-- who, when, why. Kept when the job is resumed one by one, as history of the last bulk
-- action; deleted with the job.
CREATE TABLE IF NOT EXISTS job_pause_notes (
    job_id  TEXT PRIMARY KEY,
    action  TEXT NOT NULL CHECK (action IN ('paused', 'resumed')),
    who     TEXT NOT NULL,
    note    TEXT NOT NULL,
    at_ms   INTEGER NOT NULL
) WITHOUT ROWID;

-- Stretches of time a leader with a confirmed clock vouched for (state.availability):
-- deadline alerts for instants outside them carry cause "cluster_unavailable".
CREATE TABLE IF NOT EXISTS cluster_availability (
    id      INTEGER PRIMARY KEY,
    epoch   INTEGER NOT NULL,
    from_ms INTEGER NOT NULL,
    to_ms   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS cluster_availability_to ON cluster_availability (to_ms);

-- Consecutive failures of a job with `alert_after_failures` since its last success
-- (state.run_alerts); no row: none.
CREATE TABLE IF NOT EXISTS failure_streaks (
    job_id     TEXT PRIMARY KEY,
    failures   INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
) WITHOUT ROWID;

-- Runs cancelled by a person (POST /v1/occurrences/{id}/cancel): who, when and why. The
-- row is the committed decision: a completion the worker reports later ends the run
-- `cancelled`, whatever outcome it reports. Pruned with its occurrence.
CREATE TABLE IF NOT EXISTS cancellations (
    occurrence_id TEXT PRIMARY KEY,
    who           TEXT NOT NULL,
    note          TEXT NOT NULL,
    at_ms         INTEGER NOT NULL
) WITHOUT ROWID;

-- Concurrency groups: at most max_running runs of the tenant's jobs that name the group
-- (spec.concurrency_group) hold leases at once. A group named by a job but never set
-- here has a limit of 1 (state.groups.DEFAULT_LIMIT).
CREATE TABLE IF NOT EXISTS concurrency_groups (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    max_running INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;

-- Every committed change of a job (state.job_history): create, edit, pause, resume, bulk
-- pause or resume, delete; who asked (null in entries from before the field), when (the
-- command's stamp) and the spec after the change (for a delete: the last one). `seq`
-- counts the changes of a job id over all its lives (a re-created id continues it);
-- versions restart with a re-created job and pause/resume keep theirs. At most
-- job_history.MAX_VERSIONS_PER_JOB rows per job id; those of a deleted job go with
-- retention.
CREATE TABLE IF NOT EXISTS job_history (
    job_id  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    version INTEGER NOT NULL,
    kind    TEXT NOT NULL CHECK (kind IN ('create', 'edit', 'pause', 'resume',
                                          'bulk_pause', 'bulk_resume', 'delete')),
    tenant  TEXT NOT NULL,
    who     TEXT,
    note    TEXT,
    at_ms   INTEGER NOT NULL,
    spec    TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS job_history_deletes ON job_history (at_ms, job_id)
    WHERE kind = 'delete';


-- Notification channels (core.channels): named Slack, e-mail or webhook destinations a
-- job's `notify` names. `spec` is the canonical JSON (the e-mail password included: the
-- leader sends the mail); a job names only channels of its own tenant, and a channel a
-- job names cannot be deleted (state.channels).
CREATE TABLE IF NOT EXISTS channels (
    name       TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    spec       TEXT NOT NULL,
    updated_ms INTEGER NOT NULL
) WITHOUT ROWID;

-- Jobs naming a channel whose channels were told of trouble (a failed run, an alert)
-- since their last success: the next success writes `job.recovered` (state.channels).
CREATE TABLE IF NOT EXISTS channel_trouble (
    job_id        TEXT PRIMARY KEY,
    occurrence_id TEXT,
    event         TEXT NOT NULL,
    since_ms      INTEGER NOT NULL
) WITHOUT ROWID;
