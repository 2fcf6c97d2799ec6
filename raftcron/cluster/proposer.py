"""The asyncio side of proposing commands to Raft.

pysyncobj calls back on its tick thread; results are handed to the event loop with
`call_soon_threadsafe`. `DISCARDED` means the entry was overwritten and never applied,
so it is retried; `LEADER_CHANGED` means "maybe applied": client commands carry a
request id, so retrying them returns the stored result instead of applying twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from pysyncobj import FAIL_REASON

from raftcron.cluster.raft import RaftNode
from raftcron.core.commands import Command, encode


def post_to_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    """Hand `fn(*args)` from the Raft thread to the event loop. Once the loop is closed
    (the node is shutting down while the Raft thread still applies) there is no one left
    to notify: the call is dropped rather than failing the apply (exit 70)."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass

class ProposalError(Exception):
    """The command's outcome is not known to be applied; the client may retry."""

    def __init__(self, code: str, message: str, *, maybe_applied: bool) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.maybe_applied = maybe_applied


NO_LEADER = "no_leader"
UNKNOWN_OUTCOME = "unknown_outcome"

_RETRYABLE = {FAIL_REASON.DISCARDED, FAIL_REASON.LEADER_CHANGED, FAIL_REASON.MISSING_LEADER,
              FAIL_REASON.NOT_LEADER, FAIL_REASON.QUEUE_FULL, FAIL_REASON.UNKNOWN_OUTCOME}
_MAYBE_APPLIED = {FAIL_REASON.LEADER_CHANGED, FAIL_REASON.UNKNOWN_OUTCOME}


class Proposer:
    def __init__(self, raft: RaftNode, loop: asyncio.AbstractEventLoop) -> None:
        self.raft = raft
        self.loop = loop

    def _submit(self, data: bytes) -> asyncio.Future[tuple[Any, int]]:
        fut: asyncio.Future[tuple[Any, int]] = self.loop.create_future()

        def done(result: Any, err: int) -> None:
            def settle() -> None:
                if not fut.done():
                    fut.set_result((result, err))

            post_to_loop(self.loop, settle)

        self.raft.submit(data, callback=done)
        return fut

    async def propose(self, cmd: Command, timeout: float = 8.0) -> dict[str, Any]:
        """Apply `cmd` through Raft and return its result as applied on THIS node.

        Retries until `timeout` when the outcome is known not to have been applied, and
        for idempotent (request-id carrying) commands also when it may have been.
        """
        data = encode(cmd)
        deadline = time.monotonic() + timeout
        # Client commands dedupe on request_id; heartbeats and completions are idempotent.
        idempotent = not cmd.LEADER_ONLY
        delay = 0.05
        last_err = FAIL_REASON.MISSING_LEADER
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if self.raft.leader_addr() is None and not self.raft.is_leader():
                await asyncio.sleep(min(delay, remaining))
                delay = min(delay * 2, 0.5)
                last_err = FAIL_REASON.MISSING_LEADER
                continue
            try:
                result, err = await asyncio.wait_for(self._submit(data), remaining)
            except TimeoutError:
                raise ProposalError(
                    UNKNOWN_OUTCOME, "timed out waiting for the command to commit",
                    maybe_applied=True,
                ) from None
            if err == FAIL_REASON.SUCCESS:
                return result
            last_err = err
            maybe = err in _MAYBE_APPLIED
            if err not in _RETRYABLE or (maybe and not idempotent):
                raise ProposalError(
                    UNKNOWN_OUTCOME if maybe else NO_LEADER,
                    f"raft refused the command (reason {err})", maybe_applied=maybe,
                )
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.5)
        if last_err == FAIL_REASON.MISSING_LEADER:
            raise ProposalError(NO_LEADER, "the cluster has no leader", maybe_applied=False)
        raise ProposalError(
            UNKNOWN_OUTCOME, f"gave up after retries (last reason {last_err})",
            maybe_applied=last_err in _MAYBE_APPLIED,
        )

    async def propose_leader(self, cmd: Command, timeout: float = 5.0) -> dict[str, Any]:
        """Propose a leader-only command once; never forwarded, never retried."""
        if not self.raft.is_leader():
            raise ProposalError(NO_LEADER, "not the leader", maybe_applied=False)
        try:
            result, err = await asyncio.wait_for(self._submit(encode(cmd)), timeout)
        except TimeoutError:
            raise ProposalError(UNKNOWN_OUTCOME, "leader command timed out",
                                maybe_applied=True) from None
        if err != FAIL_REASON.SUCCESS:
            raise ProposalError(UNKNOWN_OUTCOME, f"leader command failed (reason {err})",
                                maybe_applied=err in _MAYBE_APPLIED)
        return result
