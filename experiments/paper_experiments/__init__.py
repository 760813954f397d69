"""The paper §9 experiments, each defined once as a library function returning a result
dataclass; ``cpgym compare|dynamic|cache-ablation`` are thin wrappers over them and
``experiments/paper/*.yaml`` are the same experiments as sweep specs (tested to agree in
``tests/experiments/test_paper_experiments.py``).

* :mod:`.end_to_end` — a policy suite at several request rates (``cpgym compare``);
* :mod:`.dynamic_phases` — split/merge controller vs fixed compositions (``cpgym dynamic``);
* :mod:`.cache_ablation` — local caches vs the global prefix-cache manager (``cpgym cache-ablation``).
"""
