"""Each tenant's jobs and schedules as the quotas read them (state.tenant_usage): always
what counting the jobs gives, through inserts, edits, moves and deletes, and filled for a
database written before the table existed."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

from raftcron.core.tenant_policy import schedule_count
from raftcron.state.db import open_writer
from raftcron.state.tenants import USAGE_SQL

TENANTS = ("acme", "globex", "initech")


def _spec(rnd: random.Random) -> dict:
    shape = rnd.randrange(4)
    if shape == 0:
        return {"schedule": {"cron": "0 3 * * *"}}
    if shape == 1:
        return {"schedule": {"cron": "0 3 * * *"}, "schedules": []}  # empty: one
    return {"schedule": {"cron": "0 3 * * *"},
            "schedules": [{"cron": f"{m} 3 * * *"} for m in range(rnd.randrange(1, 5))]}


def _counted(conn: sqlite3.Connection, tenant: str) -> tuple[int, int]:
    specs = [json.loads(s) for (s,) in conn.execute(
        "SELECT spec FROM jobs WHERE tenant = ?", (tenant,))]
    return len(specs), sum(schedule_count(s) for s in specs)


def test_the_kept_counts_are_always_what_counting_gives(tmp_path: Path) -> None:
    conn = open_writer(str(tmp_path / "state.db"))
    rnd = random.Random(36)
    ids: list[str] = []
    for step in range(600):
        op = rnd.randrange(10)
        if op < 5 or not ids:
            job_id = f"j{step}"
            conn.execute("INSERT INTO jobs (id, tenant, version, spec, paused, queue, "
                         "watermark_ms, created_ms, updated_ms) VALUES (?,?,1,?,0,'q',0,0,0)",
                         (job_id, rnd.choice(TENANTS), json.dumps(_spec(rnd))))
            ids.append(job_id)
        elif op < 7:
            conn.execute("UPDATE jobs SET spec = ?, version = version + 1 WHERE id = ?",
                         (json.dumps(_spec(rnd)), rnd.choice(ids)))
        elif op < 8:
            conn.execute("UPDATE jobs SET tenant = ? WHERE id = ?",
                         (rnd.choice(TENANTS), rnd.choice(ids)))
        elif op < 9:
            conn.execute("UPDATE jobs SET watermark_ms = ? WHERE id = ?",
                         (step, rnd.choice(ids)))
        else:
            job_id = ids.pop(rnd.randrange(len(ids)))
            conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        if step % 50 == 0 or step == 599:
            for tenant in (*TENANTS, "nobody"):
                assert conn.execute(USAGE_SQL, (tenant,)).fetchone() == \
                    _counted(conn, tenant), (step, tenant)


def test_an_older_database_gets_its_counts_when_opened(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    conn = open_writer(path)
    rnd = random.Random(7)
    for i in range(40):
        conn.execute("INSERT INTO jobs (id, tenant, version, spec, paused, queue, "
                     "watermark_ms, created_ms, updated_ms) VALUES (?,?,1,?,0,'q',0,0,0)",
                     (f"j{i}", rnd.choice(TENANTS), json.dumps(_spec(rnd))))
    for trigger in ("tenant_usage_added", "tenant_usage_changed", "tenant_usage_deleted"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE tenant_usage")
    conn.close()
    conn = open_writer(path)
    for tenant in TENANTS:
        assert conn.execute(USAGE_SQL, (tenant,)).fetchone() == _counted(conn, tenant)
    conn.close()
    conn = open_writer(path)  # opened again: nothing is counted twice
    for tenant in TENANTS:
        assert conn.execute(USAGE_SQL, (tenant,)).fetchone() == _counted(conn, tenant)
