"""The overview's search (`GET /v1/status/jobs?q=`) over a large fleet, side by side:

- kept words: what the API does now. Each job's words are a row of `job_search`, kept by
  triggers (state.job_search), matched with one `instr` a word in SQL, the first 201 by
  id (`api.status.matching_job_ids` itself; past 8 words, page by page);
- computed per search: what it did before. The words computed from every job's spec at
  each search and matched in Python.

Prints the median of 5 for each query, and the ratio.

    python bench/overview_search.py [--jobs 1000000] [--db PATH]

`--db` keeps the fleet between runs (built when missing).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import machine_line, write_jobs  # noqa: E402
from raftcron.api.status import matching_job_ids  # noqa: E402
from raftcron.state.job_search import searched_words  # noqa: E402

LIMIT = 201


def queries(jobs: int) -> dict[str, list[str]]:
    last = f"fleet-{jobs - 1:07d}"
    return {
        "one job, the last by id": [last],
        "every job matches": ["fleet"],
        "no job matches": ["zzz"],
        "8 words, all but the last match": ["fleet", "billing", "3", "*", "utc", "active",
                                            "default", "zzz"],
        "36 one-letter words (8 in SQL, the rest between pages)":
            list("abcdefghijklmnopqrstuvwxyz0123456789"),
    }


def build(path: Path, jobs: int) -> None:
    write_jobs(path, jobs, {"schedule": "0 3 * * *", "labels": {"team": "billing"},
                            "target": {"shell": "true"}}, "fleet-")


class Reader:
    """What `matching_job_ids` reads through (api.context.ApiContext.fetchall)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    async def fetchall(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        return self.conn.execute(sql, params).fetchall()


def kept_words(conn: sqlite3.Connection, words: list[str]) -> list[str]:
    return asyncio.run(matching_job_ids(Reader(conn), "", [], words,  # type: ignore[arg-type]
                                        LIMIT))


def computed_per_search(conn: sqlite3.Connection, words: list[str]) -> list[str]:
    texts = conn.execute(f"SELECT id, {searched_words('jobs')} FROM jobs ORDER BY id")
    return [i for i, t in texts if all(w in t for w in words)][:LIMIT]


def median_s(fn, conn: sqlite3.Connection, words: list[str]) -> float:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn(conn, words)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--db", type=Path, help="keep the fleet here (built when missing)")
    args = ap.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "state.db"
        if not db.exists():
            t0 = time.perf_counter()
            build(db, args.jobs)
            print(f"built {args.jobs:,} jobs in {time.perf_counter() - t0:.1f} s")
        conn = sqlite3.connect(db)
        print(f"{args.jobs:,} jobs; median of 5, seconds")
        print("| query | kept words | computed per search | ratio |\n|---|---:|---:|---:|")
        for name, words in queries(args.jobs).items():
            assert kept_words(conn, words) == computed_per_search(conn, words), name
            new = median_s(kept_words, conn, words)
            old = median_s(computed_per_search, conn, words)
            print(f"| {name} | {new:.3f} | {old:.3f} | {old / max(new, 1e-6):.0f}x |")


if __name__ == "__main__":
    main()
