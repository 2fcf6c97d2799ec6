import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftcron.core import commands as c
from raftcron.core import identity
from raftcron.core.model import parse_job
from raftcron.state.db import last_applied, open_writer
from raftcron.state.digest import digest
from raftcron.state.machine import StateMachine

MIN = 60_000
T0 = 1_767_225_600_000
JOBS = ["ja", "jb", "jc"]
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- operations (abstract; turned into commands against the current state) ---------------

job_idx = st.integers(0, len(JOBS) - 1)
stale_flag = st.sampled_from([False, False, False, True])
op_put = st.tuples(
    st.just("put"), job_idx, st.sampled_from(["allow", "forbid", "replace", "buffer_one"]),
    stale_flag, st.integers(1, 3), st.integers(0, 2), st.sampled_from([None, 2, 5]),
    st.sampled_from([2, 5, 30]),
)
op_simple = st.tuples(st.sampled_from(["pause", "resume", "delete"]), job_idx)
op_begin = st.tuples(st.just("begin"), st.integers(-2, 2))
claim_item = st.tuples(job_idx, st.integers(0, 12), st.sampled_from(
    ["fire", "fire", "fire", "misfire", "paused"]), st.sampled_from([0, 0, 0, 1]),
    st.integers(0, 3))
op_claim = st.tuples(st.just("claim"), stale_flag, st.lists(claim_item, min_size=1,
                                                               max_size=5))
op_trigger = st.tuples(st.just("trigger"), job_idx, st.integers(0, 2), st.booleans(),
                       st.integers(0, 2))
op_backfill = st.tuples(st.just("backfill"), job_idx, st.integers(0, 1),
                        st.lists(st.integers(0, 5), min_size=1, max_size=3))
op_lease = st.tuples(st.just("lease"), stale_flag, st.integers(0, 1), st.integers(1, 4),
                     st.booleans())
token_mode = st.sampled_from(["right", "right", "stale", "foreign"])
op_hb = st.tuples(st.just("hb"), st.integers(0, 50), token_mode)
op_complete = st.tuples(st.just("complete"), st.integers(0, 50), token_mode,
                        st.sampled_from(["succeeded", "failed"]), st.integers(0, 1))
op_release = st.tuples(st.just("release"), st.integers(0, 50), token_mode)
op_sweep = st.tuples(st.just("sweep"), stale_flag)
op_advance = st.tuples(st.just("advance"), st.sampled_from([500, 3_000, 20_000, MIN]))
op_alert = st.tuples(st.just("alert"), stale_flag, st.integers(0, 1), st.booleans())
op_misc = st.tuples(st.sampled_from(["prune", "replay", "reopen", "ack"]), st.integers(0, 50))
# Webhook delivery: a short run of steps over the outbox (often enough to reach dead rows
# and retries within one example).
op_outbox = st.tuples(st.just("outbox"), st.lists(st.sampled_from(
    ["enqueue", "route", "deliver", "deliver", "wait", "retry", "webhook_key"]),
    min_size=2, max_size=8), st.integers(0, 50))

ops = st.lists(
    st.one_of(op_put, op_put, op_simple, op_begin, op_claim, op_claim, op_trigger, op_backfill,
              op_lease, op_lease, op_hb, op_complete, op_complete, op_release, op_sweep,
              op_advance, op_advance, op_alert, op_alert, op_misc, op_outbox, op_outbox),
    min_size=10, max_size=45,
)
initial_jobs = st.lists(op_put, min_size=len(JOBS), max_size=len(JOBS)).map(
    lambda puts: [(p[0], i, *p[2:]) for i, p in enumerate(puts)])


def job_spec(job_id, overlap, paused, max_attempts, backoff, runtime, hb_timeout):
    body = {"id": job_id, "schedule": "* * * * *", "target": {"shell": "true"},
            "overlap_policy": overlap, "paused": paused, "max_attempts": max_attempts,
            "retry_backoff_s": backoff, "heartbeat_timeout_s": hb_timeout}
    if runtime is not None:
        body["max_runtime_s"] = runtime
    return parse_job(body).to_spec()


class Cluster:
    """Two independent SQLite state machines fed the same log."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.paths = [os.path.join(tmp, "a.db"), os.path.join(tmp, "b.db")]
        # Node b decides claims item by item: node a's set path (state.bulk_claim) must
        # leave the same state and return the same results.
        self.nodes = [StateMachine(open_writer(self.paths[0])),
                      StateMachine(open_writer(self.paths[1]), bulk_claims=False)]
        self.log: list[c.Command] = []
        self.now = T0
        self.epoch = 0
        self.req = 0
        self.deleted: set[str] = set()
        self.created: set[str] = set()
        self.tokens: list[int] = []
        self.leases: list[tuple[str, int, str]] = []
        self.watermarks: dict[str, int] = {}

    @property
    def a(self):
        return self.nodes[0].conn

    def q(self, sql, *args):
        return self.a.execute(sql, args).fetchall()

    def rid(self):
        self.req += 1
        return f"r{self.req}"

    def digest(self):
        return digest(self.a)

    def apply(self, cmd):
        index = len(self.log) + 1
        ra = self.nodes[0].apply(index, cmd)
        rb = self.nodes[1].apply_bytes(index, c.encode(cmd))
        self.log.append(cmd)
        assert ra == rb
        da, db = digest(self.nodes[0].conn), digest(self.nodes[1].conn)
        assert da == db
        for n in self.nodes:
            assert last_applied(n.conn) == index
        return ra

    def apply_unchanged(self, cmd):
        """Apply a command that must be rejected and change nothing but last_applied."""
        before = self.digest()
        r = self.apply(cmd)
        assert self.digest() == before, (cmd, r)
        return r

    def stale_epoch(self):
        return self.epoch - 1 if self.epoch > 1 else self.epoch + 1

    def check_invariants(self):
        assert self.q(
            "SELECT job_id, scheduled_for_ms FROM occurrences WHERE kind = 'scheduled' "
            "GROUP BY job_id, scheduled_for_ms HAVING count(*) > 1") == []
        assert self.q(
            "SELECT fencing_token FROM attempts WHERE fencing_token IS NOT NULL "
            "GROUP BY fencing_token HAVING count(*) > 1") == []
        for job_id, wm in self.q("SELECT id, watermark_ms FROM jobs"):
            assert wm >= self.watermarks.get(job_id, wm)
            self.watermarks[job_id] = wm
            top = self.q("SELECT max(scheduled_for_ms) FROM occurrences "
                         "WHERE job_id = ? AND kind = 'scheduled'", job_id)[0][0]
            assert top is None or top <= wm
        # a finished occurrence has no live attempt; a pending/running one has exactly one
        for occ_id, status in self.q("SELECT id, status FROM occurrences"):
            live = self.q("SELECT count(*) FROM attempts WHERE occurrence_id = ? "
                          "AND status IN ('pending', 'running')", occ_id)[0][0]
            if status in ("pending", "running"):
                assert live == 1, (occ_id, status, live)
            elif status != "cancelled":
                assert live == 0, (occ_id, status, live)
        # an acknowledged lease, or an attempt waiting to be leased, waits for no
        # acknowledgement; every release for want of one is counted
        assert self.q("SELECT count(*) FROM attempts WHERE ack_deadline_ms IS NOT NULL AND "
                      "(status = 'pending' OR acked_ms IS NOT NULL)") == [(0,)]
        released = self.q("SELECT coalesce(sum(unacked_releases), 0) FROM attempts")[0][0]
        counted = self.q("SELECT coalesce(max(value), 0) FROM meta "
                         "WHERE key = 'leases_unacknowledged'")[0][0]
        assert released <= counted

    # --- operations ---------------------------------------------------------------------
    def run(self, op):
        kind = op[0]
        getattr(self, "op_" + kind)(*op[1:])
        self.check_invariants()

    def op_put(self, j, overlap, paused, max_attempts, backoff, runtime, hb_timeout):
        job_id = JOBS[j]
        spec = job_spec(job_id, overlap, paused, max_attempts, backoff, runtime, hb_timeout)
        create = job_id not in self.created
        r = self.apply(c.PutJob(self.rid(), self.now, spec, create))
        assert r["ok"]
        if create:
            self.created.add(job_id)
            self.deleted.discard(job_id)

    def op_pause(self, j):
        self.apply(c.PauseJob(self.rid(), self.now, JOBS[j]))

    def op_resume(self, j):
        self.apply(c.ResumeJob(self.rid(), self.now, JOBS[j]))

    def op_delete(self, j):
        r = self.apply(c.DeleteJob(self.rid(), self.now, JOBS[j]))
        if r["ok"]:
            self.deleted.add(JOBS[j])
            self.created.discard(JOBS[j])
            self.watermarks.pop(JOBS[j], None)

    def op_begin(self, delta):
        term = self.epoch + delta
        cmd = c.BeginEpoch(term=term, node_id="n", now_ms=self.now)
        if delta <= 0:
            r = self.apply_unchanged(cmd)
            assert r["rejected"] == "stale_epoch"
        else:
            assert self.apply(cmd)["ok"]
            self.epoch = term

    def op_claim(self, stale, items):
        versions = dict(self.q("SELECT id, version FROM jobs"))
        raw = []
        for j, k, decision, bad_version, dispatch_delay in items:
            job_id = JOBS[j]
            at = T0 + k * MIN
            raw.append([job_id, versions.get(job_id, 1) + bad_version, at,
                        at + dispatch_delay * 1000, decision])
        if stale:
            r = self.apply_unchanged(c.Claim(epoch=self.stale_epoch(), now_ms=self.now,
                                             items=raw))
            assert r["rejected"] == "stale_epoch"
            return
        before = {row[0]: row[1] for row in self.q(
            "SELECT id || '@' || scheduled_for_ms, status FROM occurrences "
            "WHERE kind = 'scheduled'")}
        r = self.apply(c.Claim(epoch=self.epoch, now_ms=self.now, items=raw))
        assert r["ok"]
        assert r["fired"] + r["skipped"] + len(r["rejected_items"]) == len(raw)
        after = self.q("SELECT count(*) FROM occurrences WHERE kind = 'scheduled'")[0][0]
        assert after == len(before) + r["fired"] + r["skipped"]

    def op_trigger(self, j, key, override, rid_reuse):
        job_id = JOBS[j]
        rid = f"trig-{job_id}-{key}-{rid_reuse}"
        oid = identity.manual_occurrence_id(job_id, f"k{key}")
        existed = bool(self.q("SELECT 1 FROM occurrences WHERE id = ?", oid))
        n_before = self.q("SELECT count(*) FROM occurrences")[0][0]
        r = self.apply(c.TriggerManual(rid, self.now, job_id, f"k{key}", override))
        n_after = self.q("SELECT count(*) FROM occurrences")[0][0]
        if existed:
            assert n_after == n_before
        if r["ok"]:
            assert r["occurrence_id"] == oid

    def op_backfill(self, j, key, ks):
        job_id = JOBS[j]
        self.apply(c.Backfill(self.rid(), self.now, job_id, f"bf{key}",
                              [T0 - (k + 1) * MIN for k in ks]))

    def op_lease(self, stale, worker, n, acknowledge):
        pending = [r[0] for r in self.q(
            "SELECT id FROM attempts WHERE status = 'pending' ORDER BY id")]
        ids = pending[:n]
        if stale:
            r = self.apply_unchanged(c.Lease(epoch=self.stale_epoch(), now_ms=self.now,
                                             worker_id=f"w{worker}", attempt_ids=ids))
            assert r["rejected"] == "stale_epoch"
            return
        r = self.apply(c.Lease(epoch=self.epoch, now_ms=self.now, worker_id=f"w{worker}",
                               attempt_ids=ids, acknowledge=acknowledge))
        assert r["ok"]
        for lease in r["leases"]:
            tok = lease["fencing_token"]
            assert not self.tokens or tok > self.tokens[-1], (self.tokens[-1:], tok)
            assert identity.token_epoch(tok) == self.epoch
            self.tokens.append(tok)
            self.leases.append((lease["attempt_id"], tok, f"w{worker}"))
            nb = self.q("SELECT not_before_ms FROM attempts WHERE id = ?",
                        lease["attempt_id"])[0][0]
            assert nb <= self.now  # nothing dispatched early

    def _pick(self, pick, mode):
        if not self.leases:
            return None
        attempt_id, tok, worker = self.leases[pick % len(self.leases)]
        if mode == "right":
            return attempt_id, tok, worker, False
        current = self.q("SELECT fencing_token FROM attempts WHERE id = ?", attempt_id)
        current_tok = current[0][0] if current else None
        if mode == "stale":
            bad = tok if current_tok != tok else tok + 7
            return attempt_id, bad, worker, True
        return attempt_id, tok, "w-foreign", True

    def _worker_cmd(self, pick, mode, build):
        chosen = self._pick(pick, mode)
        if chosen is None:
            return
        attempt_id, tok, worker, must_reject = chosen
        cmd = build(attempt_id, tok, worker)
        if must_reject:
            r = self.apply_unchanged(cmd)
            assert r["results"][0]["rejected"] in ("stale_token", "foreign_lease", "not_found")
        else:
            self.apply(cmd)

    def op_hb(self, pick, mode):
        self._worker_cmd(pick, mode, lambda a, t, w: c.Heartbeat(
            now_ms=self.now, worker_id=w, attempts=[[a, t]]))

    def op_complete(self, pick, mode, outcome, exit_code):
        self._worker_cmd(pick, mode, lambda a, t, w: c.Complete(
            now_ms=self.now, worker_id=w, completions=[[a, t, outcome, exit_code, "out"]]))

    def op_release(self, pick, mode):
        self._worker_cmd(pick, mode, lambda a, t, w: c.Release(
            now_ms=self.now, worker_id=w, attempts=[[a, t]]))

    def op_sweep(self, stale):
        running = [r[0] for r in self.q(
            "SELECT id FROM attempts WHERE status = 'running' ORDER BY id")]
        if stale:
            r = self.apply_unchanged(c.Sweep(epoch=self.stale_epoch(), now_ms=self.now,
                                             attempt_ids=running))
            assert r["rejected"] == "stale_epoch"
        else:
            self.apply(c.Sweep(epoch=self.epoch, now_ms=self.now, attempt_ids=running))

    def op_advance(self, ms):
        self.now += ms

    def op_alert(self, stale, n, resolve):
        epoch = self.stale_epoch() if stale else self.epoch
        if resolve:
            cmd = c.ResolveAlert(epoch=epoch, now_ms=self.now, alert_id=f"al{n}")
        else:
            cmd = c.RaiseAlert(epoch=epoch, now_ms=self.now, alert_id=f"al{n}", kind="k")
        if stale:
            assert self.apply_unchanged(cmd)["rejected"] == "stale_epoch"
        else:
            self.apply(cmd)

    def op_ack(self, n):
        ids = [r[0] for r in self.q("SELECT id FROM outbox ORDER BY id")]
        if ids:
            self.apply(c.AckOutbox(epoch=self.epoch, now_ms=self.now,
                                   outbox_id=ids[n % len(ids)], delivered=n % 2 == 0))

    RECEIVERS = (["http://a/h", "cluster"], ["http://b/h", "tenant:t"])

    def op_outbox(self, steps, n):
        for i, step in enumerate(steps):
            if step == "wait":
                self.now += 13_000
            else:
                getattr(self, "op_" + step)(n + i)

    def op_enqueue(self, n):
        """A new outbox row (an alert that is raised once)."""
        self.apply(c.RaiseAlert(epoch=self.epoch, now_ms=self.now, alert_id=f"once-{self.rid()}",
                                kind="k"))

    def op_route(self, n):
        fresh = [r[0] for r in self.q(
            "SELECT id FROM outbox o WHERE status = 'pending' AND NOT EXISTS "
            "(SELECT 1 FROM outbox_deliveries d WHERE d.outbox_id = o.id) ORDER BY id")]
        routes = [[oid, [list(r) for r in self.RECEIVERS[: (n + i + 1) % 3]]]
                  for i, oid in enumerate(fresh)]
        self.apply(c.RouteOutbox(epoch=self.epoch, now_ms=self.now, routes=routes))

    def op_deliver(self, n):
        pending = self.q("SELECT outbox_id, receiver FROM outbox_deliveries "
                         "WHERE status = 'pending' ORDER BY outbox_id, receiver")
        results = [[oid, receiver, (n >> (i % 5)) % 2 == 0, "HTTP 503"]
                   for i, (oid, receiver) in enumerate(pending)]
        self.apply(c.AckDeliveries(epoch=self.epoch, now_ms=self.now, give_up_ms=25_000,
                                   max_attempts=(n % 4) or None, results=results))

    def op_retry(self, n):
        dead = [r[0] for r in self.q(
            "SELECT DISTINCT outbox_id FROM outbox_deliveries WHERE status = 'dead'")]
        oid = dead[n % len(dead)] if dead and n % 3 else n
        self.apply(c.RetryOutbox(self.rid(), self.now, oid,
                                 "http://a/h" if n % 2 else None))

    def op_webhook_key(self, n):
        self.apply(c.SetWebhookKey(self.rid(), self.now, ["cluster", "tenant:t"][n % 2],
                                   f"key-{n}-" + "k" * 32, replace=n % 3 == 0))

    def op_prune(self, n):
        self.apply(c.Prune(self.rid(), self.now, before_ms=self.now - n * 1000, limit=5))

    def op_replay(self, n):
        """Re-apply an already applied index: a no-op on both nodes."""
        if not self.log:
            return
        i = n % len(self.log)
        before = self.digest()
        for node in self.nodes:
            assert node.apply(i + 1, self.log[i]) == {"ok": True, "replayed": True}
            assert digest(node.conn) == before
            assert last_applied(node.conn) == len(self.log)

    def op_reopen(self, n):
        """Restart node `n % 2`: the state and the applied index survive."""
        k = n % 2
        before = digest(self.nodes[k].conn)
        self.nodes[k].conn.close()
        self.nodes[k] = StateMachine(open_writer(self.paths[k]), bulk_claims=k == 0)
        assert digest(self.nodes[k].conn) == before
        assert self.nodes[k].last_applied == len(self.log)

    def close(self):
        for n in self.nodes:
            n.conn.close()


@SETTINGS
@given(initial_jobs, ops)
def test_random_command_sequences(setup, operations):
    with tempfile.TemporaryDirectory() as tmp:
        cl = Cluster(tmp)
        try:
            cl.apply(c.BeginEpoch(term=1, node_id="n", now_ms=cl.now))
            cl.epoch = 1
            for op in setup + operations:
                cl.run(op)
            final = cl.digest()
            # re-applying the whole log (every prefix index) changes nothing
            for i, cmd in enumerate(cl.log, start=1):
                for node in cl.nodes:
                    assert node.apply(i, cmd) == {"ok": True, "replayed": True}
            assert cl.digest() == final == digest(cl.nodes[1].conn)
            # a fresh node replaying the log from scratch converges to the same state
            fresh = StateMachine(open_writer(os.path.join(tmp, "c.db")))
            for i, cmd in enumerate(cl.log, start=1):
                fresh.apply_bytes(i, c.encode(cmd))
            assert digest(fresh.conn) == final
            fresh.conn.close()
        finally:
            cl.close()
