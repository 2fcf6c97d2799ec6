"""One backup -> restore check of the digest, taken while the run's load goes on.

The harness stops the leader and one follower (SIGSTOP), so the other follower can apply
nothing more and stands still at one index N. It downloads a backup from that node with
`raftcron backup`, then reads the node's digest (hashing the state takes seconds on a
loaded node: it is read once), and lets the two others go on (a pause of several seconds,
like the `pause-two` fault). When the digest's index is the backup's, the node held that
one state throughout (an applied index never goes back). The backup is restored with
`raftcron restore` into a fresh directory, opened as a node would open it, and its digest
is compared with the one the node reported at N (the member records left out on both
sides: a restore drops them, since a restored backup starts a new cluster). The outcome is
one `backup` line in the history; the checker (chaos/checks_backup.py) names every way it
can go wrong.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from chaos.history import History
from chaos.procs import Processes
from raftcron.cluster import membership
from raftcron.ops.backup import STATE_FILE, BackupError, inspect
from raftcron.state.db import open_writer
from raftcron.state.digest import digest

SETTLE_S = 1.0  # lets an apply that was under way when the others stopped finish
TRIES = 3


def _digest(http: httpx.Client, url: str) -> dict[str, Any]:
    r = http.get(url + "/v1/digest", timeout=20)
    r.raise_for_status()
    return r.json()


def _cli(args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "raftcron", *args], env=env,
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise BackupError(f"raftcron {args[0]} exited {done.returncode}: "
                          f"{(done.stderr or done.stdout).strip()[-300:]}")


def restored_digest(backup_file: Path, data_dir: Path, env: dict[str, str]) -> str:
    """Restore `backup_file` into the fresh `data_dir` with the CLI and digest the result
    after opening it the way a starting node does (schema ensured)."""
    _cli(["restore", "--from", str(backup_file), "--data-dir", str(data_dir)], env)
    conn = open_writer(str(data_dir / STATE_FILE))
    try:
        return digest(conn)
    finally:
        conn.close()


def backup_digests(backup_file: Path, work: Path) -> tuple[str, str]:
    """The backup's digest as a node opens it (the source's reported digest at the
    backup's index must be this), and the same without the member records: a restore
    drops them by design (raftcron.ops.backup.restore: a restored backup starts a new
    cluster, which records its own members), so the restored digest must be the second."""
    copy = work / f"{backup_file.stem}-digested.db"
    shutil.copyfile(backup_file, copy)
    conn = open_writer(str(copy))
    try:
        full = digest(conn)
        conn.execute(f"DELETE FROM {membership.TABLE}")
        return full, digest(conn)
    finally:
        conn.close()
        copy.unlink()


def frozen_backup(procs: Processes, http: httpx.Client, env: dict[str, str], source: str,
                  others: list[str], backup_file: Path) -> dict[str, Any]:
    """Stop `others`, back up `source` and read its digest; always resume the others."""
    pids = [p for p in (procs.node_pid(n) for n in others) if p is not None]
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(SETTLE_S)
        # No barrier: with the others stopped no leader can commit one; the node is still.
        _cli(["backup", "--server", procs.urls[source], "--out", str(backup_file),
              "--no-barrier"], env)
        after = _digest(http, procs.urls[source])
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    return {"after": after, "paused": others,
            "backup_index": inspect(str(backup_file)).last_applied_index}


def backup_restore_check(procs: Processes, history: History, out: Path) -> None:
    """Run the check (up to TRIES times until the source stood still) and record it."""
    op = history.new_id()
    work = out / "backup"
    work.mkdir(exist_ok=True)
    env = dict(os.environ, RAFTCRON_TOKEN=procs.admin_token)
    http = httpx.Client(headers=procs.auth_headers())
    history.write("backup", "invoke", "backup-restore", op=op)
    try:
        for attempt in range(1, TRIES + 1):
            leader = procs.wait_leader(20)
            followers = [n for n in procs.alive_nodes() if n != leader]
            if leader is None or not followers:
                raise BackupError("no leader with a live follower to back up")
            source = followers[0]
            others = [n for n in procs.ids if n != source]
            backup_file = work / f"backup-{attempt}.db"
            seen = frozen_backup(procs, http, env, source, others, backup_file)
            index = seen["backup_index"]
            still = seen["after"]["last_applied_index"] == index
            if not still:
                history.write("backup", "note", "backup-moved", op=op, node=source,
                              attempt=attempt, backup_index=index, after=seen["after"])
                procs.wait_leader(20)
                continue
            restored = restored_digest(backup_file, work / f"restored-{attempt}", env)
            full, without_members = backup_digests(backup_file, work)
            history.write("backup", "ok", "backup-restore", op=op, node=source,
                          paused=others, attempt=attempt, index=index,
                          cluster_digest=seen["after"]["digest"], backup_digest=full,
                          backup_digest_without_members=without_members,
                          restored_digest=restored)
            return
        history.write("backup", "fail", "backup-restore", op=op,
                      error=f"the source moved during every one of {TRIES} tries")
    except (BackupError, httpx.HTTPError, OSError, ValueError, KeyError,
            subprocess.TimeoutExpired) as e:
        history.write("backup", "fail", "backup-restore", op=op,
                      error=f"{type(e).__name__}: {e}")
    finally:
        http.close()
        procs.wait_leader(20)
