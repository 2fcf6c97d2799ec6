"""Bulk reads and writes that SQLite runs in one step, so they keep no other thread waiting.

Python's sqlite3 releases the GIL around every `sqlite3_step`: once per row fetched, and
once per parameter set of an `executemany`. Each time, another busy thread of the node (the
event loop answering HTTP, the Raft tick thread applying entries, a reader) takes the GIL
and may keep it for the whole switch interval. Measured on the 2-core machine with two
busy Python threads beside it (bench/one_step.py): fetching 1,000 rows by id took 1.8 s
instead of 2.5 ms, and a 1,000-row `executemany` 2.4 s instead of 7 ms. A herd (tens of
thousands of runs due at one instant) is exactly when every thread of the leader is busy.

Here the rows travel as one JSON array instead: a read is wrapped in `json_group_array`,
a write reads its rows from `json_each` of one bound parameter. SQLite then does the whole
statement in one step, without the GIL, and Python decodes or encodes one string in C.

Values must survive JSON: TEXT (without NUL characters: SQLite's JSON stops a string
at one), INTEGER and NULL. No BLOBs; REAL only where a float's round trip through text
is acceptable.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any


def wrap_select(sql: str, ncols: int) -> str:
    """`sql` (a SELECT of `ncols` columns) as a query of one row and one column: its rows
    as a JSON array of arrays (decode with `decode_rows`). The order of the rows is not
    promised: a caller that needs an order sorts them."""
    cols = ", ".join(f"c{i}" for i in range(ncols))
    return f"WITH q({cols}) AS ({sql}) SELECT json_group_array(json_array({cols})) FROM q"


def decode_rows(cell: str | None) -> list[tuple]:
    """The rows of a `wrap_select` query's one cell."""
    return [tuple(row) for row in json.loads(cell or "[]")]


def select_all(conn: sqlite3.Connection, sql: str, params: Sequence[Any],
               ncols: int) -> list[tuple]:
    """Every row of `sql` (a SELECT of `ncols` columns), fetched in one step."""
    return decode_rows(conn.execute(wrap_select(sql, ncols), params).fetchone()[0])


def rows_table(names: Sequence[str]) -> str:
    """A table expression of the rows bound as one JSON parameter (`rows_param`), with
    the given column names: `FROM <this> AS u` in an UPDATE ... FROM."""
    cols = ", ".join(f"json_extract(value, '$[{i}]') AS {name}" for i, name in enumerate(names))
    return f"(SELECT {cols} FROM json_each(?))"


def rows_param(rows: Iterable[Sequence[Any]]) -> str:
    return json.dumps([list(row) for row in rows], ensure_ascii=False)


def has_nul(row: Sequence[Any]) -> bool:
    """Whether a value of `row` is text holding a NUL character (which JSON in SQLite would
    cut short): such a row is written with its own parameters instead."""
    return any(isinstance(value, str) and "\x00" in value for value in row)


# Up to this many distinct value sets, rows are updated by id lists (`id IN json_each`),
# one statement per set: about half the cost of the join with the JSON rows (bench/one_step).
FEW_VALUE_SETS = 4


def update_all(conn: sqlite3.Connection, table: str, fixed: str, columns: Sequence[str],
               rows: Sequence[Sequence[Any]], leading: Sequence[Any] = ()) -> None:
    """`UPDATE table SET <fixed>, <column> = <the row's value>... WHERE id = <the row's id>`
    for every row, in one SQLite step per statement.

    `rows`: (id, one value per column); `fixed`: assignments common to every row, whose `?`
    take `leading`. Of two rows of one id the last one wins, as in an `executemany`. Rows
    that share their values (most of a herd's completions: exit code 0, no output) go as
    lists of ids, the others as one join with the JSON rows, and a row whose text holds a
    NUL (`has_nul`) with its own parameters.
    """
    if not rows:
        return
    rows = list({row[0]: row for row in rows}.values())
    sets = ", ".join([fixed, *(f"{col} = ?" for col in columns)])
    by_values: dict[tuple, list[Any]] = {}
    plain, with_nul = [], []
    for row in rows:
        if has_nul(row):
            with_nul.append(row)
        else:
            plain.append(row)
            by_values.setdefault(tuple(row[1:]), []).append(row[0])
    if len(by_values) <= FEW_VALUE_SETS:
        for values, ids in by_values.items():
            conn.execute(f"UPDATE {table} SET {sets} WHERE id IN (SELECT value FROM "
                         "json_each(?))", (*leading, *values, json.dumps(ids, ensure_ascii=False)))
    else:
        joined = ", ".join([fixed, *(f"{col} = u.{col}" for col in columns)])
        conn.execute(f"UPDATE {table} SET {joined} FROM {rows_table(['id', *columns])} AS u "
                     f"WHERE {table}.id = u.id", (*leading, rows_param(plain)))
    if with_nul:
        conn.executemany(f"UPDATE {table} SET {sets} WHERE id = ?",
                         [(*leading, *row[1:], row[0]) for row in with_nul])
