"""Schemathesis hooks of the conformance test (loaded through SCHEMATHESIS_HOOKS).

- `format: cron` gets a strategy of valid expressions (every field in range, firing at
  least once), as a client reading the format's description would write them; so do
  `local-date-time` (a one-time schedule's time) and `interval` (an interval's length).
- Constraints between fields, which JSON Schema cannot state and /openapi.json names in
  descriptions, are kept by putting generated ranges in order before they are sent:
  `end_at` after `start_at` (of `schedule` and of each entry of `schedules`); a backfill
  `end` not before `start` and at most ten years after it; the duration bounds in order
  (`min_duration_s` at most `max_duration_s`, a bound not below `max_runtime_s` dropped);
  a calendar window's `end` after its `start` (swapped, or the window dropped when both
  are one instant); a job PUT's body `id` the one of its URL; the names of a job's
  `schedules` distinct (an unnamed one is named by its position, so an explicit name of
  digits or a repeated one is replaced by a fresh one). References must name what
  exists in the job's tenant (a 400 `invalid_reference` otherwise, as the descriptions
  say): a chained job's `after.job` becomes the first of `REFERENCE_JOBS` (which are never
  chained themselves, nor deleted: such a DELETE goes to another name)
  and a `notify` channel `REFERENCE_CHANNEL`, both of tenant `default`, which the job
  then takes; a channel's `mute` becomes `REFERENCE_CALENDAR` (and its tenant `default`).
  Every other value goes out as generated.
- The one exclusion: `POST /v1/leases` is a long poll. A `wait_s` within the range the
  schema declares (`x-long-poll`) keeps the request open that long when no run is due, so
  generated values in range are shortened to `LONG_POLL_CAP_S`; values outside the range
  are sent as generated (the server must refuse them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import schemathesis
from hypothesis import strategies as st

from raftcron.core.backfill import MAX_BACKFILL_SPAN_MS
from raftcron.core.model import JOB_ID_RE, NAME_RE

# What the conformance test's node holds before the run (tests/system/test_api_contract).
REFERENCE_JOBS = ("contract-up", "contract-up-2")
REFERENCE_CHANNEL = "contract-chan"
REFERENCE_CALENDAR = "contract-cal"

LONG_POLL_CAP_S = 0.2


def _field(lo: int, hi: int) -> st.SearchStrategy[str]:
    """One cron field: `*`, a value, a range, a step, a list, or `H`."""
    value = st.integers(lo, hi)
    ranged = st.tuples(value, value).map(lambda ab: f"{min(ab)}-{max(ab)}")
    step = st.tuples(st.sampled_from(["*", "H"]), st.integers(1, hi - lo + 1)).map(
        lambda s: f"{s[0]}/{s[1]}")
    single = st.one_of(st.just("*"), st.just("H"), value.map(str), ranged, step)
    return st.lists(single, min_size=1, max_size=3).map(",".join)


# Day of month at most 28: every month has it, so every expression fires.
CRON = st.one_of(
    st.sampled_from(["@yearly", "@monthly", "@weekly", "@daily", "@hourly", "@midnight"]),
    st.tuples(st.one_of(st.none(), _field(0, 59)), _field(0, 59), _field(0, 23),
              _field(1, 28), _field(1, 12), _field(0, 6)).map(
        lambda f: " ".join(x for x in f if x is not None)),
)
schemathesis.openapi.format("cron", CRON)
# A one-time schedule's local date-time (days up to 28: every month has them) and an
# interval, as a client reading their descriptions would write them.
LOCAL_DATE_TIME = st.tuples(st.integers(1971, 9998), st.integers(1, 12), st.integers(1, 28),
                            st.integers(0, 23), st.integers(0, 59), st.integers(0, 59)).map(
    lambda t: "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}".format(*t))
schemathesis.openapi.format("local-date-time", LOCAL_DATE_TIME)
INTERVAL = st.one_of(st.integers(1, 59).map(lambda n: f"{n}s"),
                     st.integers(1, 1440).map(lambda n: f"{n}m"),
                     st.tuples(st.integers(1, 23), st.integers(1, 59)).map(
                         lambda t: f"{t[0]}h{t[1]}m"),
                     st.integers(1, 366).map(lambda n: f"{n}d"))
schemathesis.openapi.format("interval", INTERVAL)


def _instant_ms(text: Any) -> int | None:
    if not isinstance(text, str):
        return None
    try:
        return int(datetime.fromisoformat(text.replace("z", "Z")).timestamp() * 1000)
    except (ValueError, OverflowError):
        return None


def _keep_ranges_ordered(operation_path: str, body: dict[str, Any]) -> None:
    """Put generated ranges in order (swap the ends, or drop an optional `end_at` equal
    to `start_at`); ends that are not instants are left as generated."""
    if operation_path.endswith("/backfill"):
        start, end = _instant_ms(body.get("start")), _instant_ms(body.get("end"))
        if start is not None and end is not None:
            if end < start:
                body["start"], body["end"] = body["end"], body["start"]
            if abs(end - start) > MAX_BACKFILL_SPAN_MS:
                body["end"] = body["start"]
        return
    exclude = body.get("exclude")
    if operation_path.startswith("/v1/calendars/") and isinstance(exclude, list):
        _keep_windows_ordered(exclude)
        return
    jobs = body.get("jobs")
    for item in jobs if isinstance(jobs, list) else [body]:
        if isinstance(item, dict):
            _keep_bounds_ordered(item)
            _keep_schedule_names_distinct(item.get("schedules"))
        if not isinstance(item, dict):
            continue
        listed = item.get("schedules")
        for schedule in [item.get("schedule"), *(listed if isinstance(listed, list) else [])]:
            if isinstance(schedule, dict):
                _keep_schedule_bounds_ordered(schedule)


def _keep_schedule_bounds_ordered(schedule: dict[str, Any]) -> None:
    """Swap a schedule's `start_at` and `end_at` when the end comes first; drop an
    `end_at` equal to `start_at`."""
    start, end = _instant_ms(schedule.get("start_at")), _instant_ms(schedule.get("end_at"))
    if start is not None and end is not None and end <= start:
        if end < start:
            schedule["start_at"], schedule["end_at"] = schedule["end_at"], schedule["start_at"]
        else:
            schedule["end_at"] = None


def _keep_windows_ordered(exclude: list[Any]) -> None:
    """Swap a calendar window whose `end` is before its `start`; drop one whose ends are
    the same instant (the window [t, t) holds nothing, and the server refuses it)."""
    for item in list(exclude):
        if not isinstance(item, dict) or set(item) != {"start", "end"}:
            continue
        start, end = _instant_ms(item["start"]), _instant_ms(item["end"])
        if start is None or end is None:
            continue
        if end < start:
            item["start"], item["end"] = item["end"], item["start"]
        elif end == start:
            exclude.remove(item)


def _keep_schedule_names_distinct(schedules: Any) -> None:
    """Rename an explicit schedule name that is all digits (a position's default name) or
    repeats an earlier one to `s<position>`, which neither can be."""
    if not isinstance(schedules, list):
        return
    seen: set[str] = set()
    for i, item in enumerate(schedules):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str):
            continue
        if name.isdigit() or name in seen:
            name = f"s{i}"
            while name in seen:
                name += "x"
            item["name"] = name
        seen.add(name)


def _whole(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and float(value).is_integer()


def _keep_bounds_ordered(job: dict[str, Any]) -> None:
    """Swap a `min_duration_s` above `max_duration_s`; drop (null) a duration bound not
    below `max_runtime_s`. Values that are not whole numbers are left as generated."""
    lo, hi = job.get("min_duration_s"), job.get("max_duration_s")
    if _whole(lo) and _whole(hi) and lo > hi:
        job["min_duration_s"], job["max_duration_s"] = hi, lo
    kill = job.get("max_runtime_s")
    if _whole(kill):
        for key in ("min_duration_s", "max_duration_s"):
            if _whole(job.get(key)) and job[key] >= kill:
                job[key] = None


def _keep_the_urls_job_id(case: Any, body: dict[str, Any]) -> None:
    """A job PUT may repeat its URL's id in the body, and only that one: a generated id
    the schema allows becomes the URL's (one it refuses is sent as generated)."""
    job_id = (case.path_parameters or {}).get("job_id")
    if case.method.upper() == "PUT" and case.operation.path == "/v1/jobs/{job_id}" \
            and isinstance(body.get("id"), str) and JOB_ID_RE.fullmatch(body["id"]) \
            and isinstance(job_id, str):
        body["id"] = job_id


def prepare_node(c: Any, nid: str = "n1") -> None:
    """Create what the references in generated bodies are pointed at (a LocalCluster)."""
    for job_id in REFERENCE_JOBS:
        resp = c.post(nid, "/v1/jobs", {"id": job_id, "schedule": "0 9 * * *",
                                        "target": {"shell": "true"}})
        assert resp.status_code == 201, resp.text
    for path, body in ((f"/v1/calendars/{REFERENCE_CALENDAR}", {"exclude": []}),
                       (f"/v1/channels/{REFERENCE_CHANNEL}",
                        {"webhook": {"url": "http://127.0.0.1:9/hook"}})):
        resp = c.http.put(c.urls[nid] + path, json=body)
        assert resp.status_code in (200, 201), resp.text


# The paths whose DELETE could remove what references point at: (path, parameter, names).
REFERENCED = (("/v1/jobs/{job_id}", "job_id", REFERENCE_JOBS),
              ("/v1/calendars/{name}", "name", (REFERENCE_CALENDAR,)),
              ("/v1/channels/{name}", "name", (REFERENCE_CHANNEL,)))


def _keep_references_alive(case: Any) -> None:
    """A DELETE of a referenced job, calendar or channel (the stateful phase finds their
    names in listings) goes to another name: the references must keep existing."""
    if case.method.upper() != "DELETE" or not isinstance(case.path_parameters, dict):
        return
    for path, param, names in REFERENCED:
        if case.operation.path == path and case.path_parameters.get(param) in names:
            case.path_parameters[param] = f"{case.path_parameters[param]}-not-deleted"


def _keep_references_existing(case: Any, body: dict[str, Any]) -> None:
    """Point a well-formed `after.job` and `notify` channel at what the node holds; a
    referenced job itself is never chained (two of them following each other would be a
    cycle)."""
    if case.operation.path == "/v1/channels/{name}" and isinstance(body.get("mute"), str) \
            and NAME_RE.fullmatch(body["mute"]):
        body["mute"] = REFERENCE_CALENDAR
        body["tenant"] = "default"
    url_job = (case.path_parameters or {}).get("job_id")
    jobs = body.get("jobs")
    moved = False
    for item in jobs if isinstance(jobs, list) else [body]:
        if not isinstance(item, dict):
            continue
        after = item.get("after")
        if isinstance(after, dict) and isinstance(after.get("job"), str) \
                and JOB_ID_RE.fullmatch(after["job"]):
            own = item.get("id") if isinstance(item.get("id"), str) else url_job
            if own in REFERENCE_JOBS:
                del item["after"]
                if "schedules" not in item:
                    item["schedule"] = "0 9 * * *"
            else:
                after["job"] = REFERENCE_JOBS[0]
                item["tenant"] = moved = "default"
        notify = item.get("notify")
        for entry in notify if isinstance(notify, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("channel"), str) \
                    and NAME_RE.fullmatch(entry["channel"]):
                entry["channel"] = REFERENCE_CHANNEL
                item["tenant"] = moved = "default"
    if moved and isinstance(jobs, list) and "tenant" in body:
        body["tenant"] = "default"  # a plan's jobs are its tenant's


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: Any) -> None:
    """Every phase sends through here (filters and maps apply to some phases only)."""
    if case.operation.path.endswith("/backfill-preview") and isinstance(case.query, dict):
        _keep_ranges_ordered("/backfill", case.query)
    _keep_references_alive(case)
    body = case.body
    if not isinstance(body, dict):
        return
    _keep_ranges_ordered(case.operation.path, body)
    _keep_the_urls_job_id(case, body)
    _keep_references_existing(case, body)
    long_poll = case.operation.definition.raw.get("x-long-poll") or {}
    field = long_poll.get("parameter")
    wait = body.get(field) if field else None
    if isinstance(wait, int | float) and not isinstance(wait, bool) \
            and LONG_POLL_CAP_S < wait <= long_poll["max_s"]:
        body[field] = LONG_POLL_CAP_S
