"""`GET /metrics`: Prometheus text exposition of one node.

Event metrics (fire lag, epoch changes, webhook deliveries, watchdog pings) are kept in
process by `NodeMetrics`; gauges over the replicated state (occurrences by status,
attempts by status, active leases, retries, open alerts, pending outbox rows) are read
from this node's SQLite at scrape time by a custom collector, so they are as fresh as
this node's applied index.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from raftcron.api.cluster import cluster_tick
from raftcron.core.ahead import REFUSAL_REASONS
from raftcron.core.timefmt import parse_iso_ms
from raftcron.state.backlog import queue_backlog
from raftcron.state.db import META_CLOCK, META_EPOCH, META_UNACKED_LEASES, get_meta

if TYPE_CHECKING:
    from raftcron.node_view import NodeView

LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
               300.0, 3600.0)
OCC_STATUSES = ("pending", "running", "succeeded", "failed", "skipped", "cancelled")
ATT_STATUSES = ("pending", "running", "succeeded", "failed", "lost", "timed_out", "cancelled")


class NodeMetrics:
    """The in-process metrics of one node (not the global prometheus registry: tests may
    run several nodes in one process)."""

    def __init__(self) -> None:
        self.fire_lag = Histogram(
            "raftcron_fire_lag_seconds",
            "Lease time minus nominal scheduled time, observed on the leader when a lease "
            "commits", ["kind"], buckets=LAG_BUCKETS, registry=None)
        self.leases = Counter("raftcron_leases_granted", "Leases committed by this node as "
                              "leader", registry=None)
        self.epoch_changes = Counter("raftcron_epoch_changes",
                                     "begin_epoch commands applied on this node", registry=None)
        self.webhooks = Counter("raftcron_webhook_deliveries",
                                "Webhook requests sent by this node as leader", ["result"],
                                registry=None)
        self.watchdog = Counter("raftcron_watchdog_pings", "Watchdog pings sent by this node "
                                "as leader", ["result"], registry=None)
        self.leases_ahead = Counter(
            "raftcron_leases_ahead", "Leases committed by this node as leader before their "
            "run's instant (dispatch ahead: the worker starts the run at the instant)",
            registry=None)
        self.ahead_refused = Counter(
            "raftcron_lease_polls_ahead_refused", "Lease polls answered by this node as leader "
            "from workers that take no run ahead (their clock is unmeasured, or off the "
            "cluster's by more than the tolerance)", ["reason"], registry=None)
        self.workers_refusing = RefusingWorkers()
        self.skew_ms: int | None = None

    def observe_leases(self, now_ms: int, leases: list[dict[str, Any]]) -> None:
        for lease in leases:
            try:
                scheduled = parse_iso_ms(lease["scheduled_for"], "scheduled_for")
            except Exception:  # noqa: BLE001 - a metric must never break the apply path
                continue
            # A lease granted ahead is handed out now and starts at its `start_at_ms`.
            start = lease.get("start_at_ms")
            started = max(now_ms, start) if isinstance(start, int) else now_ms
            self.fire_lag.labels(lease.get("kind", "scheduled")).observe(
                max(0.0, (started - scheduled) / 1000))
            self.leases.inc()
            if isinstance(start, int) and start > now_ms:
                self.leases_ahead.inc()

    def observe_poll(self, worker_id: str, ahead_refused: str | None) -> None:
        """A lease poll this node serves as leader: whether its worker refused runs ahead."""
        if ahead_refused is not None:
            self.ahead_refused.labels(ahead_refused).inc()
        self.workers_refusing.observe(worker_id, ahead_refused, time.monotonic())

    def on_duty_event(self, duty: str, result: str) -> None:
        (self.webhooks if duty == "webhook" else self.watchdog).labels(result).inc()

    def event_collectors(self) -> list[Collector]:
        return [self.fire_lag, self.leases, self.leases_ahead, self.ahead_refused,
                self.workers_refusing, self.epoch_changes, self.webhooks, self.watchdog]


class RefusingWorkers(Collector):
    """`raftcron_workers_refusing_ahead{reason}`: workers whose latest lease poll (within
    `WINDOW_S`) refused runs ahead, by reason."""

    WINDOW_S = 60.0

    def __init__(self) -> None:
        self._latest: dict[str, tuple[str | None, float]] = {}

    def observe(self, worker_id: str, reason: str | None, now_mono: float) -> None:
        self._latest[worker_id] = (reason, now_mono)
        if len(self._latest) > 10_000:  # bounded: forget the workers not seen lately
            self._forget(now_mono)

    def _forget(self, now_mono: float) -> None:
        for wid, (_, at) in list(self._latest.items()):
            if now_mono - at > self.WINDOW_S:
                del self._latest[wid]

    def counts(self, now_mono: float) -> dict[str, int]:
        self._forget(now_mono)
        out: dict[str, int] = {}
        for reason, _ in self._latest.values():
            if reason is not None:
                out[reason] = out.get(reason, 0) + 1
        return out

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("raftcron_workers_refusing_ahead", "Workers whose latest lease "
                              "poll here (last 60 s, this node as leader) took no run ahead, "
                              "by reason", labels=["reason"])
        counts = self.counts(time.monotonic())
        for reason in REFUSAL_REASONS:
            g.add_metric([reason], counts.get(reason, 0))
        yield g


def _gauge(name: str, doc: str, value: float | None, labels: dict[str, str] | None = None
           ) -> GaugeMetricFamily:
    if labels:
        g = GaugeMetricFamily(name, doc, labels=list(labels))
        if value is not None:
            g.add_metric(list(labels.values()), value)
        return g
    g = GaugeMetricFamily(name, doc)
    if value is not None:
        g.add_metric([], value)
    return g


def election_counters(raft: Any) -> Iterator[Metric]:
    """Elections this node started, pre-vote rounds it held, times it stopped leading
    (cluster.election; the log names the trigger of each)."""
    for name, attr, doc in (
            ("raftcron_elections_started", "elections_started",
             "Elections this node started (term raised), since the process started"),
            ("raftcron_pre_vote_rounds", "pre_vote_rounds",
             "Pre-vote rounds this node held before raising its term"),
            ("raftcron_leader_step_downs", "leader_step_downs",
             "Times this node stopped being leader (higher term seen or "
             "leaderFallbackTimeout)")):
        value = getattr(raft, attr, None)
        if isinstance(value, int):
            yield CounterMetricFamily(name, doc, value=value)


class StateCollector(Collector):
    """Gauges computed for one scrape from a status snapshot and SQLite counts."""

    def __init__(self, node: NodeView, status: dict[str, Any], tick_ms: int | None) -> None:
        self.node = node
        self.status = status
        self.tick_ms = tick_ms

    def _counts(self) -> dict[str, Any]:
        conn = self.node.open_reader()
        try:
            return {
                "now_ms": (now := int(time.time() * 1000)),
                "backlog": queue_backlog(conn, now),
                "occ": dict(conn.execute(
                    "SELECT status, count(*) FROM occurrences GROUP BY status").fetchall()),
                "att": dict(conn.execute(
                    "SELECT status, count(*) FROM attempts GROUP BY status").fetchall()),
                "retries": conn.execute(
                    "SELECT count(*) FROM attempts WHERE number > 1").fetchone()[0],
                "alerts": dict(conn.execute(
                    "SELECT kind, count(*) FROM alerts WHERE status = 'open' GROUP BY kind"
                ).fetchall()),
                "outbox": conn.execute(
                    "SELECT count(*) FROM outbox WHERE status = 'pending'").fetchone()[0],
                "outbox_dead": conn.execute(
                    "SELECT count(*) FROM outbox_deliveries WHERE status = 'dead'"
                ).fetchone()[0],
                "clock_ms": get_meta(conn, META_CLOCK),
                "epoch": get_meta(conn, META_EPOCH),
                "unacked": get_meta(conn, META_UNACKED_LEASES),
            }
        except sqlite3.Error:
            return {}
        finally:
            conn.close()

    def collect(self) -> Iterator[Metric]:
        st = self.status
        counts = self._counts()
        occ = GaugeMetricFamily("raftcron_occurrences", "Occurrences by status", labels=["status"])
        for status in sorted(set(OCC_STATUSES) | set(counts.get("occ", {}))):
            occ.add_metric([status], counts.get("occ", {}).get(status, 0))
        yield occ
        att = GaugeMetricFamily("raftcron_attempts", "Attempts by status (outcome)",
                                labels=["status"])
        for status in sorted(set(ATT_STATUSES) | set(counts.get("att", {}))):
            att.add_metric([status], counts.get("att", {}).get(status, 0))
        yield att
        yield _gauge("raftcron_active_leases", "Attempts running under a lease",
                     counts.get("att", {}).get("running", 0))
        if "unacked" in counts:
            # A replicated counter (state meta): the same on every node, and it survives
            # failovers and restarts.
            yield CounterMetricFamily(
                "raftcron_leases_unacknowledged", "Leases released because the worker did "
                "not acknowledge them within the job's ack_timeout_s (leased again, not "
                "counted as attempts)", value=counts["unacked"])
        if "backlog" in counts:
            depth = GaugeMetricFamily(
                "raftcron_queue_depth", "Runs due and not yet leased, per queue",
                labels=["queue"])
            age = GaugeMetricFamily(
                "raftcron_queue_oldest_due_age_seconds", "How long the longest-waiting due "
                "run of the queue has waited for a worker (0: nothing due)", labels=["queue"])
            for q in counts["backlog"]:
                depth.add_metric([q.queue], q.depth)
                age.add_metric([q.queue], q.oldest_age_s(counts["now_ms"]))
            yield depth
            yield age
        yield _gauge("raftcron_retry_attempts", "Attempts that are retries (number > 1)",
                     counts.get("retries"))
        alerts = GaugeMetricFamily("raftcron_open_alerts", "Open alerts by kind",
                                   labels=["kind"])
        for kind in sorted(set(counts.get("alerts", {})) | {"deadline", "backlog"}):
            alerts.add_metric([kind], counts.get("alerts", {}).get(kind, 0))
        yield alerts
        yield _gauge("raftcron_outbox_pending", "Outbox rows not yet delivered",
                     counts.get("outbox"))
        yield _gauge("raftcron_outbox_dead_deliveries",
                     "Webhook deliveries given up (GET /v1/outbox?status=dead)",
                     counts.get("outbox_dead"))
        yield _gauge("raftcron_raft_term", "Raft term", st.get("term"))
        yield from election_counters(getattr(self.node, "raft", None))
        yield _gauge("raftcron_raft_commit_index", "Raft commit index", st.get("commit_index"))
        yield _gauge("raftcron_raft_applied_index", "Raft last applied index",
                     st.get("raft_last_applied"))
        yield _gauge("raftcron_state_applied_index", "Log index the SQLite state reflects",
                     st.get("last_applied_index"))
        yield _gauge("raftcron_is_leader", "1 on the leader", int(st.get("role") == "leader"))
        yield _gauge("raftcron_has_leader", "1 when this node knows a leader",
                     int(st.get("leader_id") is not None))
        yield _gauge("raftcron_leader_duties", "1 when this node runs the leader duties",
                     int(bool(st.get("leader_duties"))))
        yield _gauge("raftcron_epoch", "Current committed epoch", counts.get("epoch"))
        yield _gauge("raftcron_clock_blocked", "1 when this node, as leader, would not tick: "
                     "its clock is not confirmed by a majority or is behind the cluster",
                     int(bool(st.get("clock_blocked"))))
        clock_view = st.get("clock") or {}
        yield _gauge("raftcron_clock_confirmed", "1 when a majority of the cluster (this node "
                     "included) confirmed this node's clock within the tolerance; a leader "
                     "leases and claims nothing while it is 0",
                     int(clock_view.get("confirmed") is True))
        yield _gauge("raftcron_cluster_level", "Protocol level the cluster committed: the "
                     "features every member can read (core.protocol)", st.get("cluster_level"))
        yield _gauge("raftcron_protocol_level", "Protocol level this node speaks",
                     st.get("protocol_level"))
        probe_errors = CounterMetricFamily(
            "raftcron_clock_probe_errors", "Failed clock probes of a peer (each counts as a "
            "disagreement)", labels=["peer"])
        for peer, errs in sorted((clock_view.get("probe_errors") or {}).items()):
            probe_errors.add_metric([peer], errs["count"])
        yield probe_errors
        tick = self.tick_ms
        yield _gauge("raftcron_last_tick_timestamp_seconds",
                     "When the leader's ticker last ran (as reported by the leader)",
                     tick / 1000 if tick else None)
        yield _gauge("raftcron_tick_age_seconds", "Seconds since the leader's ticker last ran",
                     max(0.0, time.time() - tick / 1000) if tick else None)
        clock = counts.get("clock_ms")
        yield _gauge("raftcron_committed_clock_timestamp_seconds",
                     "Newest leader clock committed in the log (meta clock_ms)",
                     clock / 1000 if clock else None)
        skew = self.node.metrics.skew_ms
        yield _gauge("raftcron_clock_skew_seconds",
                     "This node's clock minus the leader's committed clock, measured when the "
                     "latest leader command was applied here (includes replication delay)",
                     skew / 1000 if skew is not None else None)
        stamp = self.status.get("stamp_clock") or {}
        yield _gauge("raftcron_stamp_offset_ms",
                     "This node's wall clock minus the cluster's confirmed time its API stamps "
                     "writes with (cluster.stamp_clock; absent: no fresh estimate)",
                     stamp.get("offset_ms"))


async def metrics(request: Request) -> Response:
    node: NodeView = request.app.state.ctx.node
    status = node.status()
    tick = await cluster_tick(request, status)
    registry = CollectorRegistry()
    for c in node.metrics.event_collectors():
        registry.register(c)
    registry.register(StateCollector(node, status, tick.get("last_tick_ms")))
    body = await asyncio.to_thread(generate_latest, registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
