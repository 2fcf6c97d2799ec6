"""Tenant policy checks the API makes before proposing (the state machine checks again
at apply, which is the decision; this lets a batch be refused whole, naming the job)."""

from __future__ import annotations

from raftcron.api.context import ApiContext
from raftcron.api.errors import HTTPError
from raftcron.core.errors import POLICY_DENIED
from raftcron.core.model import Job
from raftcron.core.tenant_policy import TenantPolicy, policy_from_row, spec_violation


async def tenant_policies(ctx: ApiContext, tenants: set[str]) -> dict[str, TenantPolicy]:
    """The committed policies of these tenants (a barrier first: a policy set a moment ago
    through another node counts)."""
    await ctx.barrier()
    found: dict[str, TenantPolicy] = {}
    names = sorted(tenants)
    for i in range(0, len(names), 500):
        chunk = names[i:i + 500]
        for name, queues, targets, hosts in await ctx.fetchall(
                "SELECT name, queues, targets, http_hosts FROM tenants WHERE name IN "
                f"({','.join('?' * len(chunk))})", tuple(chunk)):
            found[name] = policy_from_row(queues, targets, hosts)
    return found


async def refuse_batch_outside_policy(ctx: ApiContext, jobs: list[Job]) -> None:
    """403 `policy_denied` naming `jobs[i].<field>` for the first job its tenant's policy
    refuses; nothing of the batch is created then."""
    policies = await tenant_policies(ctx, {job.tenant for job in jobs})
    for i, job in enumerate(jobs):
        policy = policies.get(job.tenant)
        violation = spec_violation(policy, job.to_spec()) if policy else None
        if violation is not None:
            raise HTTPError(403, POLICY_DENIED, f"tenant {job.tenant!r} policy refuses "
                            f"{violation.field}: {violation.message}",
                            f"jobs[{i}].{violation.field}")
