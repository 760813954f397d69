"""Named policies: a router plus, optionally, the pool composition and the controllers it needs.

``POLICIES`` maps a policy name (as used by ``cpgym simulate --policy``) to a
:class:`PolicySpec`. A plain name->spec dict: add an entry to add a policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from baselines.simple import LeastWorkRouter, PrefixAffinityRouter, RandomRouter, RoundRobinRouter
from envs.sim.router import Router


@dataclass(frozen=True)
class PolicySpec:
    """A named policy.

    Args:
        name: registry key.
        make_router: builds a fresh router for one run.
        description: one line for ``--help`` and tables.
        source: where its rule and defaults come from.
        composition: pool composition it requires (e.g. a homogeneous pool), or ``None`` to use
            the run's configured pool.
        make_attachments: builds objects attached to the simulator for the run (cluster
            controller, global cache manager); each has ``attach(sim)``.
    """

    name: str
    make_router: Callable[[], Router]
    description: str
    source: str
    composition: str | None = None
    make_attachments: Callable[[], list] = field(default=lambda: [])


POLICIES: dict[str, PolicySpec] = {
    "round-robin": PolicySpec("round-robin", RoundRobinRouter, "cycle over workers in pool order", "classic load balancer"),
    "random": PolicySpec("random", RandomRouter, "uniformly random eligible worker (seeded)", "classic load balancer"),
    "least-work": PolicySpec("least-work", LeastWorkRouter, "least predicted outstanding work q_w", "paper §5 queue proxy; least-outstanding-work balancing"),
    "prefix-affinity": PolicySpec("prefix-affinity", PrefixAffinityRouter, "longest ready prefix hit, ties to less work", "cache-affinity routing (e.g. SGLang/llm-d prefix scorers, without load balance)"),
}


def get_policy(name: str) -> PolicySpec:
    """Looks up a policy by name.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}") from None
