"""Whether a requester may be shown the operator-only kubectl hints of a card.

The guide keeps some commands for operators (`kubectl describe clusterqueue`,
`kubectl get workload -n …`). Showing them to a researcher who cannot run
them is noise at best and reads like an instruction to go around the
platform at worst. So the card shows them only when the requester passes an
access review that stands for "operator": listing Kueue Workloads
cluster-wide. The review runs under the requester's impersonated identity,
exactly like the diagnosis, so the cluster's RBAC — not taubot — decides.

Answers are cached in Redis per workspace and identity for a few minutes:
RBAC changes rarely, and the review would otherwise cost one more request
on every `/tau status`. A failed review (cluster unreachable, 403 on
SelfSubjectAccessReview itself) means "no hints" and is not cached.
"""

from __future__ import annotations

import logging

import redis

from workers.kube.client import Identity
from workers.kube.reader import KubeReader, ReadError
from workers.records import keys

log = logging.getLogger(__name__)

OPERATOR_REVIEW = {"verb": "list", "resource": "workloads", "group": "kueue.x-k8s.io"}
CACHE_TTL_SECONDS = 300
CACHE_PREFIX = keys.OPERATOR_ACCESS


def cache_key(scope: str, identity: Identity) -> str:
    """Key per workspace and identity; a changed group list is a different key."""
    return keys.operator_access_key(scope, identity.model_dump_json())


async def may_see_operator_hints(reader: KubeReader, identity: Identity, *, scope: str,
                                 cache: redis.Redis | None, ttl_seconds: int = CACHE_TTL_SECONDS) -> bool:
    """True when ``identity`` may list Workloads in every namespace of the reader's cluster; the
    review is made through ``reader`` — the status's own impersonated client for ``identity``."""
    key = cache_key(scope, identity)
    if cache is not None:
        try:
            cached = cache.get(key)
        except redis.RedisError as exc:
            log.warning("operator access: cache read failed: %s", exc)
            cached = None
        if cached is not None:
            return cached == b"1"
    allowed = await reader.access_review(**OPERATOR_REVIEW)
    if isinstance(allowed, ReadError):
        log.info("operator access review failed for %s: %s", identity.user, allowed.describe())
        return False
    if cache is not None:
        try:
            cache.set(key, b"1" if allowed else b"0", ex=ttl_seconds)
        except redis.RedisError as exc:
            log.warning("operator access: cache write failed: %s", exc)
    return allowed


__all__ = ["OPERATOR_REVIEW", "cache_key", "may_see_operator_hints"]
