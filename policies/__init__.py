"""Learned policies and the one policy interface (SB3 ``predict``) shared with the heuristics.

* :mod:`policies.heuristic` — :class:`HeuristicPolicy` (any registered router acting through
  the environment), :func:`make_routing_env`, :func:`run_episode`;
* :mod:`policies.extractor` — the permutation-equivariant per-worker MaskablePPO policy;
* :mod:`policies.train` / :mod:`policies.train_reconfig` — ``cpgym train routing|reconfig``;
* :mod:`policies.arm_selection` / :mod:`policies.train_arms` — the Vertumnus router with (beta,
  lambda) chosen per decision window by a fitted model, ``cpgym train arms``;
* :mod:`policies.evaluate` — held-out evaluation with 95% confidence intervals;
* :mod:`policies.checkpoint` — loading checkpoints (``"shipped"`` = ``policies/checkpoints``).

Importing this package imports neither torch nor gymnasium; the submodules do.
"""
