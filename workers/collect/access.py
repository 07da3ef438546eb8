"""The one access review: "may this user do this?", asked as that user (SelfSubjectAccessReview).

Every read taubot makes with its own identity (ADX logs, the experiment store,
the monitor's cache shown in a thread) and every button that acts for someone
(mute, join or stop a watch, escalate, validate nodes, operator hints) first
proves the user could do the same thing, under the user's impersonated
identity. One function, so the client, the timeout and the meaning of a failed
review ("no", never "yes") are the same everywhere.
"""

from __future__ import annotations

from workers.kube.client import ClusterTarget, Identity, KubeClients
from workers.kube.reader import KubeReader, ReadError


async def review(kube: KubeClients, target: ClusterTarget, identity: Identity, verb: str, resource: str,
                 group: str = "", *, namespace: str | None = None, name: str | None = None,
                 subresource: str | None = None, timeout: float = 10.0) -> bool | ReadError:
    """The API server's answer for ``identity``; a review that could not be made is a ReadError
    (callers treat it as "not allowed" and may say why)."""
    api = await kube.user(target, identity)
    async with api:
        return await KubeReader(api, timeout).access_review(verb, resource, group, namespace=namespace,
                                                            name=name, subresource=subresource)


async def permits(kube: KubeClients, target: ClusterTarget, identity: Identity, verb: str, resource: str,
                  group: str = "", **where: str | float | None) -> bool:
    """`review`, where a review that failed counts as "no"."""
    return await review(kube, target, identity, verb, resource, group, **where) is True  # type: ignore[arg-type]


__all__ = ["permits", "review"]
