"""The overview's search (`GET /v1/status/jobs?q=`) over a large fleet: the searched text
computed once per row and matched in Python (as the API does), against one SQL LIKE
condition per word (which evaluates the text once per word). Prints medians of 5.

    python bench/overview_search.py [--jobs 20000]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import time

from raftcron.api.status import SEARCHED
from raftcron.core.model import parse_job
from raftcron.state.db import schema_sql

QUERIES = {
    "one word": ["fleet-19999"],
    "100 words (99 x 'e' and 'zzz')": ["e"] * 99 + ["zzz"],
    "36 distinct one-letter words": list("abcdefghijklmnopqrstuvwxyz0123456789"),
}


def fleet(n: int) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.executescript(schema_sql())
    for i in range(n):
        spec = parse_job({"id": f"fleet-{i:05d}", "schedule": "0 3 * * *",
                          "labels": {"team": "billing"}, "target": {"shell": "true"}}).to_spec()
        conn.execute("INSERT INTO jobs (id, tenant, version, spec, paused, queue, "
                     "watermark_ms, created_ms, updated_ms) VALUES (?, ?, 1, ?, 0, ?, 0, 0, 0)",
                     (spec["id"], "default", json.dumps(spec), "default"))
    return conn


def per_word_sql(conn: sqlite3.Connection, words: list[str]) -> int:
    where = " AND ".join([f"lower({SEARCHED}) LIKE ?"] * len(words))
    return len(conn.execute(f"SELECT id FROM jobs WHERE {where} ORDER BY id LIMIT 201",
                            [f"%{w}%" for w in words]).fetchall())


def once_per_row(conn: sqlite3.Connection, words: list[str]) -> int:
    unique = sorted(set(words))
    texts = conn.execute(f"SELECT id, lower({SEARCHED}) FROM jobs ORDER BY id").fetchall()
    return len([i for i, t in texts if all(w in t for w in unique)][:201])


def median_s(fn, conn: sqlite3.Connection, words: list[str]) -> float:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn(conn, words)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20_000)
    args = ap.parse_args()
    conn = fleet(args.jobs)
    print(f"{args.jobs} jobs; median of 5, seconds")
    print(f"{'query':34} {'per-word SQL':>13} {'once per row':>13} {'ratio':>7}")
    for name, words in QUERIES.items():
        assert per_word_sql(conn, words) == once_per_row(conn, words)
        old, new = median_s(per_word_sql, conn, words), median_s(once_per_row, conn, words)
        print(f"{name:34} {old:13.3f} {new:13.3f} {old / new:6.1f}x")


if __name__ == "__main__":
    main()
