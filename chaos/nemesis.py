"""Nemeses: start/stop pairs with targets drawn from a seeded generator.

Targets are roles ("leader", "a follower", "two nodes") resolved when the fault starts;
the random choices among the resolved nodes come from `random.Random(seed)`, so
`--seed` replays the same fault schedule (kinds, order, durations, roles, offsets).
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaos.history import History
from chaos.netns import Netns
from chaos.procs import Processes

CI_KINDS = (
    "kill-leader", "kill-follower", "kill-two", "pause-leader", "pause-two",
    "renewal-delay", "partition-leader", "partition-follower", "partition-bridge",
    "clock-bump-leader", "clock-bump", "clock-strobe", "rolling-deploy", "worker-crash",
    "worker-pause", "ack-loss", "clock-bump-worker",
)
LEADER_LOSS_KINDS = ("kill-leader", "pause-leader", "partition-leader", "renewal-delay",
                     "rolling-deploy", "kill-two", "pause-two")
DURATIONS: dict[str, tuple[float, float]] = {
    "kill-leader": (4, 7), "kill-follower": (4, 7), "kill-two": (5, 8),
    "pause-leader": (3, 6), "pause-two": (3, 6), "renewal-delay": (0, 0),
    "partition-leader": (6, 10), "partition-follower": (5, 8), "partition-bridge": (8, 12),
    "clock-bump-leader": (6, 10), "clock-bump": (6, 10), "clock-strobe": (6, 10),
    "rolling-deploy": (0, 0), "worker-crash": (3, 6), "worker-pause": (6, 9),
    "ack-loss": (10, 15), "clock-bump-worker": (6, 10),
}


# Fault pairs (`--profile long`): a fault on the nodes, and a second one that starts while
# the first is on. The second is drawn from kinds whose start cannot depend on the first
# (workers, the ack-loss proxy, clocks, a bridge cut), so a pair never fails to start only
# because its first half took the second's target away.
PAIR_SECOND_KINDS = ("worker-crash", "worker-pause", "ack-loss", "clock-bump",
                     "clock-strobe", "partition-bridge", "clock-bump-worker")
PAIR_FIRST_KINDS = tuple(k for k in CI_KINDS if k not in PAIR_SECOND_KINDS)
CLOCK_KINDS = ("clock-bump-leader", "clock-bump", "clock-strobe")
# ci: kinds run on top of another (node) fault, started partway into it, so that they add
# no time to the schedule (the ci profile's faults must fit CI_FAULT_DEADLINE_S).
CI_OVERLAY_KINDS = ("clock-bump-worker",)


@dataclass
class Planned:
    kind: str
    duration_s: float
    gap_s: float
    draw: random.Random = field(repr=False)
    # `long`: a second fault started `partner_after_s` into this one, both on at once.
    partner: Planned | None = None
    partner_after_s: float = 0.0

    def kinds(self) -> list[str]:
        return [self.kind] + ([self.partner.kind] if self.partner else [])


def plan(seed: int, profile: str, budget_s: float) -> list[Planned]:
    """The fault schedule. ci: every kind once, shuffled. long: random overlapping pairs
    until the budget is used; soak: random kinds, one at a time."""
    rng = random.Random(seed)
    out: list[Planned] = []
    if profile == "ci":
        kinds = [k for k in CI_KINDS if k not in CI_OVERLAY_KINDS]
        rng.shuffle(kinds)
        for kind in kinds:
            lo, hi = DURATIONS[kind]
            out.append(Planned(kind, rng.uniform(lo, hi), rng.uniform(3, 5),
                               random.Random(rng.getrandbits(64))))
        for kind in CI_OVERLAY_KINDS:
            hosts = [p for p in out if p.partner is None and p.duration_s > 0
                     and p.kind in PAIR_FIRST_KINDS]
            host = rng.choice(hosts)
            host.partner = _drawn(rng, kind, 1.0)
            host.partner_after_s = rng.uniform(0, host.duration_s * 0.3)
            # It ends with its host: the schedule takes no longer for it.
            host.partner.duration_s = host.duration_s - host.partner_after_s
        return out
    used = 0.0
    if profile == "long":
        while used < budget_s:
            first = rng.choice(PAIR_FIRST_KINDS)
            seconds = [k for k in PAIR_SECOND_KINDS
                       if not (first in CLOCK_KINDS and k in CLOCK_KINDS)]
            p = _drawn(rng, first, 1.5)
            second = _drawn(rng, rng.choice(seconds), 1.0)
            # The second starts while the first is on (instant faults such as
            # rolling-deploy and renewal-delay do their work as they start).
            p.partner, p.partner_after_s = second, rng.uniform(0, max(p.duration_s, 0.5) * 0.7)
            p.gap_s = rng.uniform(5, 15)
            out.append(p)
            used += max(p.duration_s, p.partner_after_s + second.duration_s) + p.gap_s + 10
        return out
    while used < budget_s:
        kind = rng.choice(CI_KINDS)
        lo, hi = DURATIONS[kind]
        p = Planned(kind, rng.uniform(lo, hi * 2), rng.uniform(3, 20),
                    random.Random(rng.getrandbits(64)))
        out.append(p)
        used += p.duration_s + p.gap_s + 8
    return out


def _drawn(rng: random.Random, kind: str, stretch: float) -> Planned:
    lo, hi = DURATIONS[kind]
    return Planned(kind, rng.uniform(lo, hi * stretch), 0.0, random.Random(rng.getrandbits(64)))


class Nemesis:
    def __init__(self, procs: Processes, netns: Netns, history: History) -> None:
        self.procs = procs
        self.netns = netns
        self.history = history
        self.paused: set[int] = set()
        self._bg: threading.Thread | None = None
        self._bg_stop = threading.Event()
        self.base_drop_p = 0.0

    # --- helpers ---------------------------------------------------------------------------

    def _leader(self) -> tuple[str | None, dict[str, Any] | None]:
        leader = self.procs.wait_leader(timeout=8)
        view = self.procs.view(leader) if leader else None
        return leader, view

    def _followers(self, leader: str | None) -> list[str]:
        return [n for n in self.procs.ids if n != leader]

    def _pause(self, pids: list[int]) -> None:
        for pid in pids:
            try:
                import os

                os.kill(pid, signal.SIGSTOP)
                self.paused.add(pid)
            except ProcessLookupError:
                pass

    def _resume(self, pids: list[int] | None = None) -> None:
        import os

        for pid in list(self.paused if pids is None else pids):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.paused.discard(pid)

    def _set_clock(self, nid: str, offset_s: float) -> None:
        path = self.procs.clock_file(nid)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{offset_s}\n")
        tmp.replace(path)

    # --- one fault, or a pair ----------------------------------------------------------------

    def run_planned(self, p: Planned, stop_requested: threading.Event) -> None:
        """Run `p`; with a partner, start the partner `partner_after_s` into `p` (on its
        own thread: both faults are on at once) and return when both have stopped."""
        if p.partner is None:
            self.run(p, stop_requested)
            return
        first = threading.Thread(target=self.run, args=(p, stop_requested),
                                 name=f"nemesis-{p.kind}")
        first.start()
        stop_requested.wait(p.partner_after_s)
        self.run(p.partner, stop_requested)
        first.join()

    def run(self, p: Planned, stop_requested: threading.Event) -> None:
        op = self.history.new_id()
        leader, view = self._leader()
        start_info: dict[str, Any] = {"leader": leader,
                                      "epoch": view.get("epoch") if view else None,
                                      "term": view.get("term") if view else None}
        starter: Callable[[Planned, str | None], tuple[dict[str, Any], Callable[[], dict]]]
        starter = getattr(self, "start_" + p.kind.replace("-", "_"))
        self.history.write("nemesis", "invoke", p.kind, op=op, planned_s=round(p.duration_s, 3),
                           **start_info)
        try:
            info, stopper = starter(p, leader)
        except Exception as e:
            self.history.write("nemesis", "fail", p.kind, op=op, error=repr(e), **start_info)
            self.heal_all()
            return
        self.history.write("nemesis", "start", p.kind, op=op, **start_info, **info)
        stop_requested.wait(p.duration_s)
        try:
            info2 = stopper()
        except Exception as e:
            info2 = {"error": repr(e)}
            self.heal_all()
        self.history.write("nemesis", "stop", p.kind, op=op, **info2)

    # kill -9 ---------------------------------------------------------------------------------

    def _kill(self, targets: list[str]) -> tuple[dict[str, Any], Callable[[], dict]]:
        pids = {t: self.procs.kill_node(t) for t in targets}
        dead = [t for t, pid in pids.items() if pid is None]
        if dead:  # nothing was killed: the fault did not happen (the checker flags "fail")
            raise RuntimeError(f"kill: no running process for {dead}")

        def stop() -> dict[str, Any]:
            new = {t: self.procs.start_node(t) for t in targets}
            return {"targets": targets, "new_pids": new}

        return {"targets": targets, "pids": pids, "signal": "SIGKILL"}, stop

    def start_kill_leader(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        return self._kill([leader or p.draw.choice(self.procs.ids)])

    def start_kill_follower(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        return self._kill([p.draw.choice(self._followers(leader))])

    def start_kill_two(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        return self._kill(sorted(p.draw.sample(self.procs.ids, 2)))

    # SIGSTOP ---------------------------------------------------------------------------------

    def _pause_nodes(self, targets: list[str]) -> tuple[dict[str, Any], Callable[[], dict]]:
        pids = {t: self.procs.node_pid(t) for t in targets}
        missing = [t for t, pid in pids.items() if pid is None]
        if missing:
            raise RuntimeError(f"pause: no running process for {missing}")
        self._pause([pid for pid in pids.values() if pid])

        def stop() -> dict[str, Any]:
            self._resume([pid for pid in pids.values() if pid])
            return {"targets": targets, "pids": pids, "signal": "SIGCONT"}

        return {"targets": targets, "pids": pids, "signal": "SIGSTOP"}, stop

    def start_pause_leader(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        return self._pause_nodes([leader or p.draw.choice(self.procs.ids)])

    def start_pause_two(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        return self._pause_nodes(sorted(p.draw.sample(self.procs.ids, 2)))

    def start_renewal_delay(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        """Short repeated pauses of the leader (10 x 300 ms, 300 ms apart): heartbeats and
        lease renewals arrive late without a clean failover."""
        target = leader or p.draw.choice(self.procs.ids)
        pid = self.procs.node_pid(target)
        pauses = [(0.3, 0.3)] * 10
        for pause_s, gap_s in pauses:
            if pid:
                self._pause([pid])
            time.sleep(pause_s)
            if pid:
                self._resume([pid])
            time.sleep(gap_s)
        return {"targets": [target], "pids": {target: pid}, "pauses": len(pauses),
                "pause_s": 0.3}, lambda: {"targets": [target]}

    # partitions ------------------------------------------------------------------------------

    def _isolate(self, target: str) -> tuple[dict[str, Any], Callable[[], dict]]:
        i = self.procs.index[target]
        self.netns.isolate(i)

        def stop() -> dict[str, Any]:
            self.netns.heal_node(i)
            return {"targets": [target], "healed": True}

        return {"targets": [target], "pids": {target: self.procs.node_pid(target)},
                "rule": "nft isolate (drop all but lo)"}, stop

    def start_partition_leader(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        return self._isolate(leader or p.draw.choice(self.procs.ids))

    def start_partition_follower(self, p: Planned,
                                 leader: str | None) -> tuple[dict, Callable]:
        return self._isolate(p.draw.choice(self._followers(leader)))

    def start_partition_bridge(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        """Cut one pair; the third node (the bridge) still sees both."""
        bridge = p.draw.choice(self.procs.ids)
        a, b = [n for n in self.procs.ids if n != bridge]
        ia, ib = self.procs.index[a], self.procs.index[b]
        self.netns.cut(ia, [ib])
        self.netns.cut(ib, [ia])

        def stop() -> dict[str, Any]:
            self.netns.heal_node(ia)
            self.netns.heal_node(ib)
            return {"targets": [a, b], "bridge": bridge, "healed": True}

        return {"targets": [a, b], "bridge": bridge, "rule": f"nft cut {a}<->{b}"}, stop

    # clocks ----------------------------------------------------------------------------------

    def _bump(self, target: str, offset_ms: int) -> tuple[dict[str, Any], Callable[[], dict]]:
        self._set_clock(target, offset_ms / 1000)

        def stop() -> dict[str, Any]:
            self._set_clock(target, 0)
            return {"targets": [target], "offset_ms": 0}

        return {"targets": [target], "pids": {target: self.procs.node_pid(target)},
                "offset_ms": offset_ms}, stop

    def start_clock_bump_leader(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        sign = p.draw.choice((-1, 1))
        return self._bump(leader or p.draw.choice(self.procs.ids),
                          sign * 2 ** p.draw.randint(12, 18))

    def start_clock_bump(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        sign = p.draw.choice((-1, 1))
        return self._bump(p.draw.choice(self.procs.ids), sign * 2 ** p.draw.randint(2, 18))

    def start_clock_bump_worker(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        """Move one worker's wall clock 128 ms to 16 s either way (its monotonic clock stays):
        within the tolerance it still leases runs ahead, beyond it it must stop; either way
        no job process may start before its instant (the early_fire check)."""
        wid = p.draw.choice(sorted(self.procs.workers))
        offset_ms = p.draw.choice((-1, 1)) * 2 ** p.draw.randint(7, 14)
        self._set_clock(f"worker-{wid}", offset_ms / 1000)

        def stop() -> dict[str, Any]:
            self._set_clock(f"worker-{wid}", 0)
            return {"targets": [wid], "offset_ms": 0}

        return {"targets": [wid], "offset_ms": offset_ms}, stop

    def start_clock_strobe(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        target = p.draw.choice(self.procs.ids)
        delta_ms = 2 ** p.draw.randint(2, 18)
        period_s = p.draw.uniform(0.05, 1.0)
        stop_ev = threading.Event()

        def strobe() -> None:
            on = False
            while not stop_ev.is_set():
                on = not on
                self._set_clock(target, delta_ms / 1000 if on else 0)
                stop_ev.wait(period_s)

        t = threading.Thread(target=strobe, daemon=True)
        t.start()

        def stop() -> dict[str, Any]:
            stop_ev.set()
            t.join(5)
            self._set_clock(target, 0)
            return {"targets": [target], "offset_ms": 0}

        return {"targets": [target], "delta_ms": delta_ms, "period_s": round(period_s, 3),
                "pids": {target: self.procs.node_pid(target)}}, stop

    # deploys ---------------------------------------------------------------------------------

    def start_rolling_deploy(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        """SIGTERM and restart each node in turn, the leader last, waiting for each."""
        order = [n for n in self.procs.ids if n != leader] + ([leader] if leader else [])
        steps = []
        for nid in order:
            old = self.procs.kill_node(nid, signal.SIGTERM, wait_s=10)
            new = self.procs.start_node(nid)
            up = self.procs.wait_up(nid, 20)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                v = self.procs.view(nid)
                if v and v.get("ready") and v.get("leader_id"):
                    break
                time.sleep(0.2)
            time.sleep(1.0)
            steps.append({"node": nid, "old_pid": old, "new_pid": new, "up": up})
            self.history.write("nemesis", "note", "rolling-deploy-step", node=nid, old_pid=old,
                               new_pid=new)
        return {"targets": order, "steps": steps}, lambda: {"targets": order}

    # workers ---------------------------------------------------------------------------------

    def start_worker_crash(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        wid = p.draw.choice(sorted(self.procs.workers))
        tree = self.procs.worker_tree(wid)
        pid = self.procs.kill_worker(wid)
        if pid is None:
            raise RuntimeError(f"worker-crash: {wid} is not running")

        def stop() -> dict[str, Any]:
            return {"targets": [wid], "new_pid": self.procs.start_worker(wid)}

        return {"targets": [wid], "pids": {wid: pid}, "orphans": tree[1:],
                "signal": "SIGKILL"}, stop

    def start_worker_pause(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        """SIGSTOP a worker and its running jobs past their heartbeat timeout: the lease
        expires and the run is retried elsewhere; on SIGCONT the old job writes late."""
        wid = p.draw.choice(sorted(self.procs.workers))
        tree = self.procs.worker_tree(wid)
        if not tree:
            raise RuntimeError(f"worker-pause: {wid} is not running")
        self._pause(tree)

        def stop() -> dict[str, Any]:
            self._resume(tree)
            return {"targets": [wid], "pids": tree, "signal": "SIGCONT"}

        return {"targets": [wid], "pids": tree, "signal": "SIGSTOP"}, stop

    def start_ack_loss(self, p: Planned, leader: str | None) -> tuple[dict, Callable]:
        high = 0.5
        self.procs.proxy_control.write_text(f"{high}\n")

        def stop() -> dict[str, Any]:
            self.procs.proxy_control.write_text(f"{self.base_drop_p}\n")
            return {"drop_p": self.base_drop_p}

        return {"targets": ["proxy"], "drop_p": high}, stop

    # --- heal ----------------------------------------------------------------------------------

    def heal_all(self) -> dict[str, Any]:
        self._resume()
        self.netns.heal_all()
        for nid in self.procs.ids:
            self._set_clock(nid, 0)
        restarted = {}
        for nid in self.procs.ids:
            if self.procs.node_pid(nid) is None:
                restarted[nid] = self.procs.start_node(nid)
        for wid in list(self.procs.workers):
            if not self.procs.worker_tree(wid):
                restarted[wid] = self.procs.start_worker(wid)
        self.procs.proxy_control.write_text(f"{self.base_drop_p}\n")
        return {"restarted": restarted}
