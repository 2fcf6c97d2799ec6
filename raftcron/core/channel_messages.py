"""What a notification channel says: one message per outbox row (core.channels.EVENTS),
as plain text (no links), a Slack incoming-webhook payload (text and blocks), or an
e-mail.

Every message names the job, its tenant, what happened, when, and the occurrence. The
same row renders to the same bytes on every leader (times are the row's, never a clock).
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

from raftcron.core.timefmt import ms_to_iso

MAX_REASON = 500
# Slack refuses a section's text over 3,000 characters.
MAX_SLACK_TEXT = 2900


@dataclass(frozen=True, slots=True)
class Facts:
    """What the leader read about an outbox row when it delivers it."""

    event: str
    payload: dict[str, Any]
    created_ms: int
    tenant: str | None = None
    scheduled_for_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Message:
    title: str
    lines: tuple[tuple[str, str], ...]  # (label, value), in order
    summary: str

    @property
    def text(self) -> str:
        """The plain-text form: the title, then one `label: value` line each."""
        return "\n".join([self.title, *(f"{k}: {v}" for k, v in self.lines)])


def _cut(text: Any, limit: int = MAX_REASON) -> str:
    s = str(text)
    return s if len(s) <= limit else s[:limit - 1] + "…"


def _what_alert(p: dict[str, Any]) -> tuple[str, str]:
    """(short headline verb, what happened) of an `alert.raised` row."""
    kind, reason = p.get("kind"), p.get("reason")
    if kind == "deadline" and reason == "missed":
        return "missed an instant", "missed instant: the run did not happen by its deadline"
    if kind == "deadline":
        return f"deadline alert ({reason})", f"deadline alert: {reason}"
    if kind == "not_started":
        return "did not start in time", "run-bound alert: not started by start_deadline_s"
    if kind == "too_fast":
        return "finished too fast", "run-bound alert: succeeded faster than min_duration_s"
    if kind == "too_slow":
        return "is running too long", "run-bound alert: running past max_duration_s"
    if kind == "failures":
        return "keeps failing", "run-bound alert: alert_after_failures reached"
    return f"raised an alert ({kind})", f"alert {kind}: {reason}"


def render(f: Facts) -> Message:
    p = f.payload
    job = str(p.get("job_id") or "?")
    occ = p.get("occurrence_id")
    lines: list[tuple[str, str]] = [("Job", job), ("Tenant", f.tenant or "?")]
    if f.event == "occurrence.failed":
        title = f"Job {job} failed"
        what = (f"run failed after its last attempt ({p.get('attempts')}): "
                f"{_cut(p.get('reason', ''))}")
    elif f.event == "alert.raised":
        verb, what = _what_alert(p)
        title = f"Job {job} {verb}"
        if p.get("message"):
            what = f"{what} ({_cut(p['message'])})"
        if p.get("cause"):
            what = f"{what}; cause: {p['cause']}"
    elif f.event == "job.recovered":
        title = f"Job {job} recovered"
        what = "the first success after " + (
            "a failed run" if p.get("after") == "occurrence.failed" else
            f"an alert ({str(p.get('after', '')).removeprefix('alert:')})")
        if p.get("after_occurrence_id"):
            what += f" (occurrence {p['after_occurrence_id']})"
    else:
        title = f"Job {job}: {f.event}"
        what = f.event
    lines.append(("What", what))
    lines.append(("When", ms_to_iso(f.created_ms) or ""))
    if f.scheduled_for_ms is not None:
        lines.append(("Instant", ms_to_iso(f.scheduled_for_ms) or ""))
    elif p.get("scheduled_for"):
        lines.append(("Instant", str(p["scheduled_for"])))
    if occ:
        lines.append(("Occurrence", str(occ)))
    return Message(title, tuple(lines), what)


# A summary of held messages lists at most this many; it counts the rest.
MAX_LISTED = 20


def held_summary(channel: str, calendar: str | None, until_ms: int | None,
                 held: list[Facts]) -> Message:
    """The one message a muted channel gets when its window ends: how many messages were
    held, from when to when, and (up to MAX_LISTED) what each said."""
    first = min((f.created_ms for f in held), default=until_ms or 0)
    n = len(held)
    title = f"{n} message{'' if n == 1 else 's'} held while {channel} was muted"
    lines: list[tuple[str, str]] = [
        ("Muted by", f"calendar {calendar}" if calendar else "a calendar since removed"),
        ("Held", f"from {ms_to_iso(first)} until {ms_to_iso(until_ms) if until_ms else '?'}"),
    ]
    for f in sorted(held, key=lambda f: f.created_ms)[:MAX_LISTED]:
        lines.append((ms_to_iso(f.created_ms) or "", render(f).title))
    if n > MAX_LISTED:
        lines.append(("More", f"{n - MAX_LISTED} more not listed"))
    return Message(title, tuple(lines), f"the mute window ended; {n} held")


def slack_payload(m: Message) -> dict[str, Any]:
    """An incoming-webhook body: `text` (the fallback and notification line) and blocks."""
    fields = "\n".join(f"*{k}:* {_escape(v)}" for k, v in m.lines)
    return {
        "text": _escape(_cut(m.text, MAX_SLACK_TEXT)),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": _cut(m.title, 150)}},
            {"type": "section", "text": {"type": "mrkdwn",
                                         "text": _cut(fields, MAX_SLACK_TEXT)}},
        ],
    }


def _escape(text: str) -> str:
    """Slack's three control characters: a job's text cannot make a link or a mention."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def email_message(m: Message, sender: str, to: list[str], message_id: str,
                  created_ms: int) -> EmailMessage:
    msg = EmailMessage()
    msg["Subject"] = _cut(f"[raftcron] {m.title}", 200).replace("\n", " ")
    msg["From"] = sender
    msg["To"] = ", ".join(to)
    msg["Date"] = format_datetime(datetime.fromtimestamp(created_ms / 1000, tz=UTC))
    msg["Message-ID"] = f"<{message_id}@raftcron>"
    msg.set_content(m.text + "\n")
    return msg
