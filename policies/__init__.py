"""Learned policies and the one policy interface (SB3 ``predict``) shared with the heuristics.

* :mod:`policies.common.heuristic` — :class:`HeuristicPolicy` (any registered router acting through
  the environment), :func:`make_routing_env`, :func:`run_episode`;
* :mod:`policies.common.extractor` — the permutation-equivariant per-worker MaskablePPO policy;
* :mod:`policies.routing.train` / :mod:`policies.reconfig.train` — ``cpgym train routing|reconfig``;
* :mod:`policies.routing.arm_selection` / :mod:`policies.routing.train_arms` — the Vertumnus router with (beta,
  lambda) chosen per decision window by a fitted model, ``cpgym train arms``;
* evaluation: the benchmark protocol (``benchmark.protocol``, ``cpgym evaluate``; checkpoints resolved by
  ``experiments.benchmark_specs``);
* :mod:`policies.common.checkpoint` — loading checkpoints (``"shipped"`` = ``policies/checkpoints``).

Importing this package imports neither torch nor gymnasium; the submodules do.
"""
