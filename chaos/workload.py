"""The workload: the jobs of a run and the client driver (triggers, edits, backfills).

Every job's side effect is a `curl` to the fenced sink at the end of its shell command,
so a paused or crashed worker's job process can write late with a stale token.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx

from chaos import checks_calendar
from chaos.history import History
from chaos.procs import HERD_SIZE, Processes

# Fall-back day in New York: 01:00-01:59:59 local happens twice (EDT, then EST from
# 06:00Z). The cluster's wall clock is moved to shortly before the fold.
DST_TRANSITION_UTC = datetime(2026, 11, 1, 6, 0, 0, tzinfo=UTC)
DST_LEAD_S = 80
CREATE_CONCURRENCY = 8  # job creations in flight at once at the start of a run
# 503 codes answered before anything was proposed: the request was definitely not applied
# (no leader; no confirmed cluster time to stamp it with), and is retried.
REFUSED_BEFORE_PROPOSING = ("no_leader", "clock_unconfirmed")


# The headers that name a run at the sink.
RUN_HEADERS = (
    ' -H "X-Job: $RAFTCRON_JOB_ID" -H "X-Occ: $RAFTCRON_OCCURRENCE_ID"'
    ' -H "X-Key: $RAFTCRON_IDEMPOTENCY_KEY" -H "X-Attempt: $RAFTCRON_ATTEMPT_ID"'
    ' -H "X-Token: $RAFTCRON_FENCING_TOKEN" -H "X-Sched: $RAFTCRON_SCHEDULED_FOR"'
    ' -H "X-Worker: $CHAOS_WORKER"')
# Posted first by a job that sleeps before its effect: the early-start check judges the
# process's start, not the effect seconds later. A failed post does not fail the job.
START_RECORD = f'curl -sS -m 5 -o /dev/null -X POST "$CHAOS_SINK/start"{RUN_HEADERS} || true'


def effect_cmd(sleep_s: float = 0, exit_code: int = 0) -> str:
    parts = []
    if sleep_s:
        parts += [START_RECORD, f"sleep {sleep_s}"]
    parts.append(f'curl -sS -f -m 5 -o /dev/null -X POST "$CHAOS_SINK/effect"{RUN_HEADERS}')
    cmd = "; ".join(parts)
    if exit_code:
        cmd += f"; exit {exit_code}"
    return cmd




def load_specs(sink_url: str) -> list[dict[str, Any]]:
    """The bulk of the load (190 jobs): a herd of 100 jobs sharing every tenth second,
    40 minute crons (second 0 and 30), 40 `H` spreads (one hashed second a minute each)
    and 10 HTTP targets that post their effect to the sink themselves."""
    fast = {"heartbeat_timeout_s": 6, "retry_backoff_s": 1, "max_attempts": 3}
    shell = {"target": {"shell": effect_cmd()}, "overlap_policy": "allow", **fast}
    out = [{"id": f"herd-{i:03d}", "schedule": {"cron": "*/10 * * * * *"}, **shell}
           for i in range(HERD_SIZE)]
    out += [{"id": f"minute-{i:02d}", "schedule": {"cron": f"{30 * (i % 2)} * * * * *"},
             **shell} for i in range(40)]
    out += [{"id": f"spread-{i:02d}", "schedule": {"cron": "H * * * * *"}, **shell}
            for i in range(40)]
    out += [{"id": f"http-{i:02d}", "schedule": {"cron": "*/5 * * * * *"},
             "overlap_policy": "allow", **fast,
             "target": {"http": {"url": sink_url + "/effect", "method": "POST",
                                 "headers": {"X-Job": f"http-{i:02d}"}}}}
            for i in range(10)]
    return out


def job_specs() -> list[dict[str, Any]]:
    """Every misfire and overlap policy, failing and slow jobs, DST jobs, edit/manual
    and backfill targets."""
    fast = {"heartbeat_timeout_s": 6, "retry_backoff_s": 1, "max_attempts": 3}
    slow = {"heartbeat_timeout_s": 3, "retry_backoff_s": 1, "max_attempts": 3}
    ny = "America/New_York"
    return [
        {"id": "skip-1s", "schedule": {"cron": "* * * * * *"}, "misfire_policy": "skip",
         "misfire_grace_s": 2, "overlap_policy": "allow", "target": {"shell": effect_cmd()},
         **fast},
        {"id": "runonce-2s", "schedule": {"cron": "*/2 * * * * *"},
         "misfire_policy": "run_once", "misfire_grace_s": 2, "overlap_policy": "allow",
         "target": {"shell": effect_cmd()}, **fast},
        {"id": "catchup-2s", "schedule": {"cron": "*/2 * * * * *"},
         "misfire_policy": "catch_up", "catch_up_max": 3, "misfire_grace_s": 2,
         "overlap_policy": "allow", "target": {"shell": effect_cmd()}, **fast},
        {"id": "forbid-slow", "schedule": {"cron": "*/2 * * * * *"},
         "overlap_policy": "forbid", "target": {"shell": effect_cmd(3)}, **slow},
        {"id": "replace-slow", "schedule": {"cron": "*/3 * * * * *"},
         "overlap_policy": "replace", "target": {"shell": effect_cmd(4)}, **slow},
        {"id": "buffer-slow", "schedule": {"cron": "*/2 * * * * *"},
         "overlap_policy": "buffer_one", "target": {"shell": effect_cmd(3)}, **slow},
        {"id": "slow-allow", "schedule": {"cron": "*/5 * * * * *"},
         "overlap_policy": "allow", "target": {"shell": effect_cmd(5)}, **slow},
        {"id": "fail-4s", "schedule": {"cron": "*/4 * * * * *"}, "overlap_policy": "allow",
         "target": {"shell": effect_cmd(0, 1)}, **fast},
        {"id": "edit-2s", "schedule": {"cron": "*/2 * * * * *"}, "overlap_policy": "allow",
         "target": {"shell": effect_cmd()}, **fast},
        {"id": "manual", "schedule": {"cron": "0 0 0 1 1 *"}, "overlap_policy": "allow",
         "target": {"shell": effect_cmd()}, **fast},
        {"id": "manual-forbid", "schedule": {"cron": "0 0 0 1 1 *"},
         "overlap_policy": "forbid", "target": {"shell": effect_cmd(2)}, **slow},
        {"id": "backfill-5s", "schedule": {"cron": "*/5 * * * * *"},
         "overlap_policy": "allow", "target": {"shell": effect_cmd()}, **fast},
        {"id": "dst-once", "schedule": {"cron": "*/5 * 1 * * *", "timezone": ny,
                                        "dst_fold": "once"},
         "overlap_policy": "allow", "target": {"shell": effect_cmd()}, **fast},
        {"id": "dst-both", "schedule": {"cron": "*/5 * 1 * * *", "timezone": ny,
                                        "dst_fold": "both"},
         "overlap_policy": "allow", "target": {"shell": effect_cmd()}, **fast},
        {"id": "dst-auto", "schedule": {"cron": "*/5 * 1 * * *", "timezone": ny},
         "overlap_policy": "allow", "target": {"shell": effect_cmd()}, **fast},
        *lifecycle_specs(),
    ]


# Jobs the driver pauses, cancels and deletes while faults run (Driver.window_ops): a
# pause just before an instant skips a run leased ahead at its check before the start.
PAUSABLE, CANCELLABLE, DELETABLE = "pausable-5s", "cancellable-slow", "deletable-1s"
PAUSABLE_PERIOD_S = 5
PAUSED_HERD_MEMBER = "herd-007"
HERD_PERIOD_S = 10  # load_specs: the herd shares every tenth second
CANCELLABLE_SLEEP_S = 8


# Chains (checks_chains): `chain-down` runs after every end of `chain-up` (seconds 2, 7, ...
# of each minute), `chain-alarm`
# after every failure of `fail-4s` (which always exits 1, after its last retry).
CHAIN_UP, CHAIN_DOWN, CHAIN_ALARM = "chain-up", "chain-down", "chain-alarm"
CHAIN_FOLLOWS = {CHAIN_DOWN: (CHAIN_UP, "finish"), CHAIN_ALARM: ("fail-4s", "failure")}


def chain_specs() -> list[dict[str, Any]]:
    """The chained jobs: created after the jobs they follow."""
    fast = {"heartbeat_timeout_s": 6, "retry_backoff_s": 1, "max_attempts": 3}
    return [{"id": job, "after": {"job": up, "on": on}, "overlap_policy": "allow",
             "target": {"shell": effect_cmd()}, **fast}
            for job, (up, on) in CHAIN_FOLLOWS.items()]


def lifecycle_specs() -> list[dict[str, Any]]:
    fast = {"heartbeat_timeout_s": 6, "retry_backoff_s": 1, "max_attempts": 3}
    return [
        {"id": PAUSABLE, "schedule": {"cron": f"*/{PAUSABLE_PERIOD_S} * * * * *"},
         "overlap_policy": "allow", "target": {"shell": effect_cmd()}, **fast},
        {"id": CANCELLABLE, "schedule": {"cron": "*/10 * * * * *"}, "overlap_policy": "allow",
         "target": {"shell": effect_cmd(CANCELLABLE_SLEEP_S)}, "heartbeat_timeout_s": 20,
         "retry_backoff_s": 1, "max_attempts": 3},
        {"id": DELETABLE, "schedule": {"cron": "* * * * * *"}, "overlap_policy": "allow",
         "target": {"shell": effect_cmd()}, **fast},
        # Off the minute's second 0, where the herd and the minute jobs already fire.
        {"id": CHAIN_UP, "schedule": {"cron": "2/5 * * * * *"}, "overlap_policy": "allow",
         "target": {"shell": effect_cmd()}, **fast},
    ]


# A second tenant beside `default`, with quotas small enough to bind: its jobs offer 240
# fires a minute against a quota of 30 (the rest are skipped as `quota`), and each run takes
# over 2 s, so the first seconds of every minute want more than 3 runs at once. The backlog
# this leaves (about 20 runs) is worked off within ~20 s, inside the stuck-check limit that
# the 20 s heartbeat timeout gives.
QUOTA_TENANT = "t2"
TENANT_QUOTAS = {"max_jobs": 10, "max_concurrent_runs": 3, "max_fires_per_minute": 30}


def tenant_specs() -> list[dict[str, Any]]:
    """The quota tenant's jobs: four every-second jobs that sleep 2 s, then write."""
    return [{"id": f"{QUOTA_TENANT}-{i}", "tenant": QUOTA_TENANT,
             "schedule": {"cron": "* * * * * *"}, "overlap_policy": "allow",
             "misfire_policy": "skip", "misfire_grace_s": 2,
             "target": {"shell": effect_cmd(2)}, "heartbeat_timeout_s": 20,
             "retry_backoff_s": 1, "max_attempts": 3} for i in range(4)]


# A concurrency group in the default tenant: three jobs fire in the same second every
# 6 s and each holds for 0.3 s, so every burst wants 3 slots of 2 (the third waits until
# a slot frees). On a loaded machine a slot turns over in about 2.5 s (lease, ack, run,
# completion, next lease: a few Raft commits), so two slots serve some 0.8 runs/s: these
# jobs want 0.5, and the backlog a fault leaves (a paused worker keeps its slots until
# its leases expire) drains within the stuck check's limit. At 1.5 s of holding every
# 3 s (and 0.5 s every 4 s) the backlog never drained there. chaos/checks_groups.py
# checks the holders.
GROUP = "chaos-db"
GROUP_LIMIT = 2


def group_cmd(hold_s: float) -> str:
    """The effect, between a start and an end record of holding the group (the effect's
    own exit code is the job's)."""
    hold = ('curl -sS -m 5 -o /dev/null -X POST "$CHAOS_SINK/hold?phase={phase}"'
            f' -H "X-Group: {GROUP}" -H "X-Job: $RAFTCRON_JOB_ID"'
            ' -H "X-Occ: $RAFTCRON_OCCURRENCE_ID" -H "X-Attempt: $RAFTCRON_ATTEMPT_ID"'
            ' -H "X-Token: $RAFTCRON_FENCING_TOKEN" -H "X-Worker: $CHAOS_WORKER"'
            ' -H "X-Sched: $RAFTCRON_SCHEDULED_FOR" || true')
    return (f"{hold.format(phase='start')}; {effect_cmd(hold_s)}; rc=$?; "
            f"{hold.format(phase='end')}; exit $rc")


def group_specs() -> list[dict[str, Any]]:
    return [{"id": f"group-{i}", "schedule": {"cron": "*/6 * * * * *"},
             "overlap_policy": "allow", "concurrency_group": GROUP,
             "target": {"shell": group_cmd(0.3)}, "heartbeat_timeout_s": 6,
             "retry_backoff_s": 1, "max_attempts": 3} for i in range(3)]


EDIT_CRONS = ("*/2 * * * * *", "*/3 * * * * *")


class Client:
    """Issues one logical client operation with retries and records each try."""

    def __init__(self, procs: Processes, history: History, rng: random.Random) -> None:
        self.procs = procs
        self.history = history
        self.rng = rng
        self.http = httpx.Client(timeout=httpx.Timeout(5.0, connect=1.0),
                                 headers=procs.auth_headers())

    def request(self, f: str, method: str, path: str, *, body: Any = None,
                headers: dict[str, str] | None = None, node: str | None = None,
                op_id: int | None = None, **fields: Any) -> tuple[str, Any, str]:
        """One try; returns (type, response json or None, node)."""
        node = node or self.rng.choice(self.procs.ids)
        op_id = op_id or self.history.new_id()
        pid = self.procs.node_pid(node)
        self.history.write("client", "invoke", f, op=op_id, node=node, pid=pid,
                           method=method, path=path, body=body, headers=headers, **fields)
        try:
            resp = self.http.request(method, self.procs.urls[node] + path, json=body,
                                     headers=headers)
        except httpx.ConnectError as e:
            self.history.write("client", "fail", f, op=op_id, node=node, pid=pid,
                               error=type(e).__name__, **fields)
            return "fail", None, node
        except httpx.HTTPError as e:
            self.history.write("client", "info", f, op=op_id, node=node, pid=pid,
                               error=type(e).__name__, **fields)
            return "info", None, node
        try:
            data = resp.json()
        except ValueError:
            data = None
        code = (data or {}).get("error", {}).get("code") if isinstance(data, dict) else None
        if 200 <= resp.status_code < 300:
            type_ = "ok"
        elif resp.status_code == 503 and code in REFUSED_BEFORE_PROPOSING:
            type_ = "fail"
        elif resp.status_code >= 500:
            type_ = "info"
        else:
            type_ = "fail"
        self.history.write("client", type_, f, op=op_id, node=node, pid=pid,
                           status=resp.status_code, code=code,
                           response=_essentials(data), **fields)
        return type_, data, node

    def retried(self, f: str, method: str, path: str, tries: int = 5,
                **kw: Any) -> tuple[str, Any]:
        """Retry an idempotent request (same Idempotency-Key) until a definite answer."""
        last: tuple[str, Any] = ("info", None)
        for i in range(tries):
            type_, data, _ = self.request(f, method, path, try_no=i + 1, **kw)
            if type_ == "ok":
                return type_, data
            if type_ == "fail" and data is not None and (data.get("error") or {}).get(
                    "code") not in REFUSED_BEFORE_PROPOSING:
                return type_, data
            last = (type_, data) if type_ == "info" or last[0] != "info" else last
            time.sleep(0.5 + 0.5 * i)
        return last


def _essentials(data: Any) -> Any:
    if not isinstance(data, dict):
        return None
    keep = ("id", "version", "status", "reason", "duplicate", "occurrence_ids", "count",
            "created", "request_key", "kind", "idempotency_key", "scheduled_for", "error",
            "job_id")
    out = {k: data[k] for k in keep if k in data}
    if "schedule" in data and isinstance(data["schedule"], dict):
        out["cron"] = data["schedule"].get("cron")
    return out


class Driver:
    """Creates the jobs, then keeps issuing triggers, edits and backfills until stopped."""

    def __init__(self, procs: Processes, history: History, seed: int,
                 base_offset_s: float) -> None:
        self.procs = procs
        self.history = history
        self.rng = random.Random(seed * 7919 + 1)
        self.client = Client(procs, history, self.rng)
        self.base_offset_s = base_offset_s
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.counts: dict[str, int] = {}

    def cluster_now(self) -> float:
        return time.time() + self.base_offset_s

    def create_tenants(self) -> None:
        """Set the quota tenant's quotas before any of its jobs exists (recorded as a
        `tenant` operation: the checker reads the quotas from it)."""
        type_, _ = self.client.retried("tenant", "PUT", f"/v1/tenants/{QUOTA_TENANT}",
                                       body=TENANT_QUOTAS, tenant=QUOTA_TENANT)
        if type_ != "ok":
            raise RuntimeError(f"could not set the quotas of tenant {QUOTA_TENANT}")
        type_, _ = self.client.retried("group", "PUT", f"/v1/concurrency-groups/{GROUP}",
                                       body={"limit": GROUP_LIMIT}, group=GROUP)
        if type_ != "ok":
            raise RuntimeError(f"could not set the limit of group {GROUP}")

    def create_calendar(self) -> None:
        """The calendar of checks_calendar's job, before the job (a `calendar` operation:
        the checker reads the exclusions from it)."""
        name = checks_calendar.CALENDAR
        type_, _ = self.client.retried("calendar", "PUT", f"/v1/calendars/{name}",
                                       body=checks_calendar.calendar_body(), calendar=name)
        if type_ != "ok":
            raise RuntimeError(f"could not put calendar {name}")

    def create_jobs(self, load: bool = True) -> None:
        self.create_tenants()
        self.create_calendar()
        fast = {"heartbeat_timeout_s": 6, "retry_backoff_s": 1, "max_attempts": 3}
        specs = job_specs() + tenant_specs() + group_specs() + checks_calendar.job_specs(
            {"shell": effect_cmd()}, **fast) + (
            load_specs(self.procs.sink_url) if load else [])

        def create(spec: dict[str, Any]) -> None:
            type_, _ = self.client.retried("create", "POST", "/v1/jobs", body=spec,
                                           headers={"Idempotency-Key": f"create-{spec['id']}"},
                                           job=spec["id"], spec=spec)
            if type_ != "ok":
                raise RuntimeError(f"could not create job {spec['id']}")

        # Eight at a time: one by one, the 209 round trips were 25 s of every run's start.
        # Each creation is its own operation in the history, acknowledged on its own.
        with ThreadPoolExecutor(CREATE_CONCURRENCY) as pool:
            list(pool.map(create, specs))
        for spec in chain_specs():  # a chained job's upstream must exist first
            create(spec)

    def start(self) -> None:
        self.thread = threading.Thread(target=self.loop, name="driver", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread:
            self.thread.join(30)

    def loop(self) -> None:
        n = 0
        while not self.stop_event.is_set():
            n += 1
            kind = self.rng.choices(["trigger", "edit", "backfill"], [5, 2, 1])[0]
            self.counts[kind] = self.counts.get(kind, 0) + 1
            try:
                getattr(self, kind)(n)
            except Exception as e:  # the driver must survive anything a nemesis causes
                self.history.write("client", "note", "driver-error", error=repr(e))
            self.stop_event.wait(self.rng.uniform(0.5, 1.5))

    def trigger(self, n: int) -> None:
        job = self.rng.choice(["manual", "manual", "manual-forbid"])
        key = f"t{n}-{self.rng.getrandbits(32):08x}"
        body = {"override_overlap": False}
        kw = {"body": body, "headers": {"Idempotency-Key": key}, "job": job, "key": key}
        type_, _ = self.client.retried("trigger", "POST", f"/v1/jobs/{job}/trigger", **kw)
        if type_ == "ok" and self.rng.random() < 0.5:
            self.client.retried("trigger", "POST", f"/v1/jobs/{job}/trigger", repeat=True, **kw)

    def edit(self, n: int) -> None:
        job = "edit-2s"
        type_, data, _ = self.client.request("read", "GET", f"/v1/jobs/{job}?consistent=true",
                                             job=job)
        if type_ != "ok" or not data:
            return
        version = data["version"]
        cron = EDIT_CRONS[1] if data["schedule"]["cron"] == EDIT_CRONS[0] else EDIT_CRONS[0]
        spec = {k: data[k] for k in ("schedule", "misfire_policy", "misfire_grace_s",
                                     "overlap_policy", "target", "heartbeat_timeout_s",
                                     "retry_backoff_s", "max_attempts")}
        spec["schedule"] = {"cron": cron, "timezone": data["schedule"]["timezone"]}
        key = f"e{n}-{self.rng.getrandbits(32):08x}"
        self.client.retried("edit", "PUT", f"/v1/jobs/{job}", body=spec,
                            headers={"Idempotency-Key": key, "If-Match": f'"{version}"'},
                            job=job, key=key, expected_version=version, cron=cron)

    # --- inside fault windows (chaos/runner.py starts these as a fault begins) ------------

    def window_ops(self, index: int, delete: bool) -> None:
        """What a fault window gets besides the fault: a pause of `PAUSABLE` just before
        one of its instants and a resume after it, a cancel of a running `CANCELLABLE`
        run every other window, and (once) the deletion of `DELETABLE`."""
        if delete:
            self.delete_job(DELETABLE)
        if index % 2 == 0:
            self.cancel_running(CANCELLABLE)
            self.pause_across_instant(PAUSABLE, PAUSABLE_PERIOD_S, 0.6)
        else:
            # A herd member: the herd is claimed and leased up to 10 s ahead, so a pause
            # 2 s before its instant finds its run leased and not started.
            self.pause_across_instant(PAUSED_HERD_MEMBER, HERD_PERIOD_S, 2.0)

    def pause_across_instant(self, job: str, period_s: int, lead_s: float) -> None:
        """Pause `lead_s` before the job's next instant (after its run was leased ahead,
        before the worker's check before the start) and resume 1.5 s after it."""
        now = self.cluster_now()
        instant = (int(now) // period_s + 1) * period_s
        if instant - now < lead_s + 0.6:
            instant += period_s
        self.stop_event.wait(instant - lead_s - self.cluster_now())
        self.client.retried("pause", "POST", f"/v1/jobs/{job}/pause", job=job)
        self.stop_event.wait(max(0.0, instant + 1.5 - self.cluster_now()))
        self.client.retried("resume", "POST", f"/v1/jobs/{job}/resume", job=job)

    def cancel_running(self, job: str) -> None:
        type_, data, _ = self.client.request(
            "read", "GET", f"/v1/occurrences?job_id={job}&status=running&limit=5", job=job)
        running = (data or {}).get("occurrences") or [] if type_ == "ok" else []
        if not running:
            return
        occ = running[0]["id"]
        self.client.retried("cancel", "POST", f"/v1/occurrences/{quote(occ, safe='')}/cancel",
                            body={"note": "chaos: cancelled inside a fault window"},
                            job=job, occurrence=occ)

    def delete_job(self, job: str) -> None:
        self.client.retried("delete", "DELETE", f"/v1/jobs/{job}", job=job)

    def backfill(self, n: int) -> None:
        job = "backfill-5s"
        now = self.cluster_now()
        start = datetime.fromtimestamp(now - 40, UTC).isoformat().replace("+00:00", "Z")
        end = datetime.fromtimestamp(now - 25, UTC).isoformat().replace("+00:00", "Z")
        key = f"b{n}-{self.rng.getrandbits(32):08x}"
        self.client.retried("backfill", "POST", f"/v1/jobs/{job}/backfill",
                            body={"start": start, "end": end},
                            headers={"Idempotency-Key": key}, job=job, key=key)
