"""One membership change mid-run, under load: remove a follower, add a fresh node.

A scheduled step of the harness (not a fault drawn by the nemesis: it cannot be skipped).
It drives the operator's own tools, `raftcron cluster remove-node` and `add-node`:

1. Cut-off. The leader's commit index C is read at cluster time T; the harness waits
   until the follower to be removed has applied C, so everything committed before T is in
   its state.
2. Departure read. That follower's jobs and occurrences (and the attempts of its
   unfinished occurrences) are read from its own state (`departed.json`): the checker
   checks its history up to T like any node's, and requires nothing of it afterwards.
   Then one digest mark is made through the leader and read from that follower and from
   every member (raftcron.testing.compare_at_mark): a `digest-mark` line records each node's digest
   at the mark's index, or its error, and the checker compares the removed node's state
   with the others' there (it is in no final digest barrier).
3. Remove it (`cluster remove-node`), then stop it with SIGTERM.
4. Start the spare slot as a fresh node and add it (`cluster add-node`; it starts with an empty
   data directory and a config listing the current members), and wait until it has
   applied the leader's commit index: it is a caught-up voter. From here on it is a member
   like any other: faults may target it, and the final reads and the digest barrier
   require it.

The outcome is one `membership` line in the history (`ok` with the nodes, the cut-off and
the timings, or `fail` with the error); the checker (chaos/checks_membership.py) calls a
run without an `ok` INVALID.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from chaos.history import History
from chaos.procs import Processes, raft_addr
from chaos.reads import read_attempts, read_node
from raftcron.testing import compare_at_mark

CATCH_UP_S = 60.0
REMOVE_TRIES = 3
MARK_TRIES = 3


class StepError(RuntimeError):
    pass


def _cli(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-m", "raftcron", *args], env=env,
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise StepError(f"raftcron {' '.join(args[:2])} exited {done.returncode}: "
                        f"{(done.stderr or done.stdout).strip()[-300:]}")
    return done.stderr + done.stdout


def _commit_index(procs: Processes, leader: str) -> int:
    view = procs.view(leader)
    if not view or view.get("commit_index") is None:
        raise StepError(f"no cluster view from the leader {leader}")
    return int(view["commit_index"])


def _wait_applied(procs: Processes, nid: str, index: int, timeout_s: float) -> float:
    """Seconds until `nid` has applied `index`."""
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        view = procs.view(nid, timeout=1.0)
        if view and (view.get("last_applied_index") or 0) >= index:
            return time.monotonic() - began
        time.sleep(0.2)
    raise StepError(f"{nid} did not apply index {index} within {timeout_s:.0f}s")


def departure_read(procs: Processes, http: httpx.Client, nid: str) -> dict[str, Any]:
    """The node's state as the final reads read it; attempts of unfinished occurrences
    only (what the stuck check needs; finished ones are checked on the members)."""
    node = read_node(http, procs.urls[nid])
    if node.get("occurrences_incomplete") or not node.get("cluster"):
        raise StepError(f"the departure read of {nid} is incomplete")
    open_ids = [o["id"] for o in node["occurrences"]
                if o["attempts"] and o["status"] in ("pending", "running")]
    node["attempts"] = read_attempts(http, procs.urls[nid], open_ids)
    return node


def _depart(procs: Processes, history: History, http: httpx.Client, out: Path, op: int
            ) -> tuple[str, float, int]:
    """Choose a follower, wait for its cut-off, write its departure read and compare its
    digest with the members' at one mark: (node, cut-off cluster time, cut-off index)."""
    leader = procs.wait_leader(20)
    followers = sorted(n for n in procs.alive_nodes() if n != leader)
    if leader is None or not followers or not procs.spares:
        raise StepError(f"no leader with a live follower, or no spare slot "
                        f"(leader {leader}, spares {procs.spares})")
    removed = followers[0]
    cutoff = time.time() + procs.base_offset_s
    cutoff_index = _commit_index(procs, leader)
    _wait_applied(procs, removed, cutoff_index, 30)
    node = departure_read(procs, http, removed)
    node.update(checked_until=cutoff, cutoff_index=cutoff_index,
                read_at=time.time() + procs.base_offset_s)
    (out / "departed.json").write_text(json.dumps({removed: node}))
    history.write("harness", "note", "departure-read", node=removed,
                  occurrences=len(node["occurrences"]), cutoff=cutoff,
                  cutoff_index=cutoff_index)
    # Every member, the departing one included (procs.ids still names it). A mark made
    # during an election, or one the departing node did not answer (paused by a fault),
    # is made again, through whichever node leads then.
    urls = {n: procs.urls[n] for n in procs.ids}
    for _ in range(MARK_TRIES):
        compared = compare_at_mark(http, procs.urls[procs.wait_leader(20) or leader], urls)
        history.write("membership", "note", "digest-mark", op=op, node=removed, **compared)
        if "digest" in (compared.get("digests") or {}).get(removed, {}):
            break
    return removed, cutoff, cutoff_index


def replace_follower(procs: Processes, history: History, out: Path) -> None:
    """Run the step and record its outcome (never raises)."""
    op = history.new_id()
    env = dict(os.environ, RAFTCRON_TOKEN=procs.admin_token)
    http = httpx.Client(timeout=10, headers=procs.auth_headers())
    history.write("membership", "invoke", "replace-node", op=op, members=procs.ids)
    began = time.monotonic()
    try:
        for attempt in range(1, REMOVE_TRIES + 1):
            removed, cutoff, cutoff_index = _depart(procs, history, http, out, op)
            remaining = [n for n in procs.ids if n != removed]
            servers = ",".join(procs.urls[n] for n in remaining)
            try:
                _cli(["cluster", "remove-node", "--server", servers, "--id", removed], env)
                break
            except StepError as e:
                # An election between the choice and the request made it the leader (the
                # API refuses to remove the leader): choose again, read again.
                if "is_leader" not in str(e) or attempt == REMOVE_TRIES:
                    raise
                history.write("membership", "note", "removal-refused", op=op, node=removed,
                              attempt=attempt, error=str(e))
        added = procs.spares[0]
        procs.set_members(remaining)
        # Stopped as an operator stops it (SIGTERM), but not waited for here: requests the
        # workers still send it can hold its graceful shutdown for seconds, while the new
        # node is added meanwhile.
        stopped = procs.signal_node(removed, signal.SIGTERM)
        removed_s = time.monotonic() - began

        # The new node runs first: the leader adds only a node that answers at its URL,
        # proving it holds the cluster secret and has applied nothing yet.
        procs.write_joiner_config(added)
        pid = procs.start_node(added)
        history.write("harness", "note", "node-start", node=added, pid=pid)
        if not procs.wait_up(added, 30):
            raise StepError(f"{added} did not answer after it started")
        _cli(["cluster", "add-node", "--server", servers, "--id", added,
              "--raft-addr", raft_addr(procs.index[added]), "--http-url", procs.urls[added]],
             env)
        procs.set_members([*remaining, added])
        leader = procs.wait_leader(20)
        if leader is None:
            raise StepError("no leader after the new node joined")
        caught_up_s = _wait_applied(procs, added, _commit_index(procs, leader), CATCH_UP_S)
        if procs.kill_node(removed, signal.SIGTERM, wait_s=15) is None and stopped is None:
            raise StepError(f"{removed} was not running when it was to be stopped")
        history.write("membership", "ok", "replace-node", op=op, removed=removed,
                      removed_pid=stopped, added=added, added_pid=pid,
                      members=procs.ids, cutoff=cutoff, cutoff_index=cutoff_index,
                      removed_s=round(removed_s, 3), caught_up_s=round(caught_up_s, 3),
                      elapsed_s=round(time.monotonic() - began, 3))
    except (StepError, httpx.HTTPError, OSError, ValueError, KeyError,
            subprocess.TimeoutExpired) as e:
        history.write("membership", "fail", "replace-node", op=op,
                      error=f"{type(e).__name__}: {e}")
    finally:
        http.close()
        procs.wait_leader(20)
