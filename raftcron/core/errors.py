"""Domain errors and rejections.

A `ValidationError` is raised while building a job or command from client input
(before anything is proposed). A `Rejection` is a *returned value* of `apply`: it is
replicated like any result, so every node agrees on it.
"""

from __future__ import annotations

from dataclasses import dataclass


class ValidationError(ValueError):
    """Client input is invalid; `field` names the offending field (dotted path)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class Rejection:
    """A deterministic domain rejection returned by `apply`."""

    code: str
    message: str
    field: str | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"rejected": self.code, "message": self.message}
        if self.field:
            out["field"] = self.field
        return out


# Rejection codes, shared by the state machine and the API's status map.
NOT_FOUND = "not_found"
ALREADY_EXISTS = "already_exists"
VERSION_CONFLICT = "version_conflict"
STALE_EPOCH = "stale_epoch"
STALE_TOKEN = "stale_token"
LEASE_EXPIRED = "lease_expired"
FOREIGN_LEASE = "foreign_lease"
INVALID_STATE = "invalid_state"
CONFLICT = "conflict"
QUOTA_EXCEEDED = "quota_exceeded"
RATE_LIMITED = "rate_limited"
FORBIDDEN = "forbidden"
# A definition that names something the state refuses it to name (the request is invalid,
# 400): a chain's upstream that does not exist in the job's tenant or closes a cycle
# (state.chains), a notify channel that does not exist in it (state.channels).
INVALID_REFERENCE = "invalid_reference"
IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
POLICY_DENIED = "policy_denied"
# A feature whose entries some member's build cannot read yet (core.protocol).
NOT_UPGRADED = "cluster_not_upgraded"
