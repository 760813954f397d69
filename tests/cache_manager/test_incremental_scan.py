"""The incremental scan of the global prefix-cache manager (lazy decay, hot-entry sets, depth and
complete holders kept on the trie, the leaf-copy reclamation queue) makes exactly the decisions
of a full rescan of the whole trie (``full_rescan.FullRescanManager``), on random workloads with
random cache events injected between the simulator's own (out-of-order evictions, reclamations,
blocks inserted before their prefix shape is known)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baselines.cache_manager import CacheManagerConfig, GlobalCacheManager
from baselines.simple import PrefixAffinityRouter
from envs.sim import EventPriority, SimConfig, Simulator
from envs.sim.links import LinkConfig
from envs.sim.router import LeastWorkRouter
from tests.cache_manager.full_rescan import FullRescanManager
from tests.cache_manager.test_cache_manager import POOL, _calibration, _trie_matches_caches, _workload


def _block(path: list[int]) -> list[int]:
    """Block hashes of a path of choices (equal prefixes share blocks)."""
    return [hash(tuple(path[:k + 1])) & 0xFFFFFFF for k in range(len(path))]


class _Incremental(GlobalCacheManager):
    """The manager under test, recording each scan's candidates (as the oracle does)."""

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self.candidates: list[tuple[dict, dict]] = []

    def scan(self) -> None:
        inter_of, intra_of = self._inter_degree_candidates, self._intra_degree_candidates
        got = [None, None]

        def inter():
            got[0] = inter_of()
            return got[0]

        def intra():
            got[1] = intra_of()
            return got[1]

        self._inter_degree_candidates, self._intra_degree_candidates = inter, intra
        try:
            super().scan()
        finally:
            del self._inter_degree_candidates, self._intra_degree_candidates
        self.candidates.append((got[0], got[1]))


def _run(manager_cls, specs, events, cfg, capacity, router, seed, queue_slack=64):
    sim = Simulator(_workload(specs), SimConfig(pool=POOL, seed=seed, links=LinkConfig(1e4, 2e3)),
                    _calibration(capacity))
    mgr = manager_cls(cfg)
    mgr.replicator.queue_slack = queue_slack  # 0: the persistent reclamation queue is rebuilt at most scans
    mgr.attach(sim)
    wids = sorted(sim.workers)

    def inject(ev):
        kind, k, path = ev
        w = sim.workers.get(wids[k % len(wids)])
        if w is None:
            return
        if kind == "remove":  # any resident block, not only a leaf: an ancestor may go before its descendants
            blocks = w.cache.blocks()
            if blocks:
                w.cache.remove(blocks[path[0] % len(blocks)])
        else:  # a prefix whose shape the trie may not know yet (no dispatch registered it)
            w.cache.insert(_block(path))

    for t, ev in events:
        sim.schedule(t, EventPriority.CONTROL, inject, ev)
    step = sim.env.step

    def checked_step():
        step()
        if manager_cls is _Incremental:
            _trie_matches_caches(sim, mgr)

    sim.env.step = checked_step
    res = sim.run(PrefixAffinityRouter() if router == "affinity" else LeastWorkRouter())
    return res, mgr


_path = st.lists(st.integers(0, 2), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompts=st.lists(st.tuples(st.floats(0.0, 8.0), _path), min_size=1, max_size=40),
       events=st.lists(st.tuples(st.floats(0.0, 10.0),
                                 st.tuples(st.sampled_from(["remove", "insert"]), st.integers(0, 3), _path)),
                       max_size=25),
       decay=st.sampled_from([0.5, 0.9, 0.7, 1.0, 0.25]), intra=st.sampled_from([0.3, 0.8, 2.0]),
       inter=st.sampled_from([1e-3, 1e-2, 5e-2]), reclaim=st.sampled_from([0.0, 0.1, 0.25]),
       caps=st.tuples(st.integers(0, 6), st.integers(0, 6)), router=st.sampled_from(["affinity", "least"]),
       capacity=st.integers(2, 8), seed=st.integers(0, 3), slack=st.sampled_from([0, 64]),
       quiet_s=st.sampled_from([0.0, 4.0]))
def test_incremental_scan_equals_a_full_rescan(prompts, events, decay, intra, inter, reclaim, caps, router,
                                               capacity, seed, slack, quiet_s):
    specs = [(t, _block(path)) for t, path in sorted(prompts, key=lambda p: p[0])]
    if quiet_s:  # one late request: scans go on through a quiet period, demand decays, duplicates are reclaimed
        specs.append((10.0 + quiet_s, _block([9])))
    cfg = CacheManagerConfig(scan_interval_s=0.4, decay=decay, inter_degree_threshold_s=inter,
                             intra_degree_threshold=intra, reclaim_threshold=min(reclaim, intra / 2),
                             max_replications_per_scan=caps[0], max_reclamations_per_scan=caps[1],
                             max_replica_share=1.0, lambda_=0.0)
    res_a, inc = _run(_Incremental, specs, events, cfg, capacity, router, seed, slack)
    res_b, ref = _run(FullRescanManager, specs, events, cfg, capacity, router, seed)
    assert inc.counters["num_scans"] == ref.counters["num_scans"] == len(inc.candidates) == len(ref.candidates)
    for k, ((inter_a, intra_a), (inter_b, intra_b)) in enumerate(zip(inc.candidates, ref.candidates)):
        assert inter_a == inter_b, f"scan {k}: inter-degree candidates"
        assert intra_a == intra_b, f"scan {k}: intra-degree candidates"
    assert inc.log == ref.log
    assert inc.counters == ref.counters
    for key in ("ttft_s", "worker_id", "num_cached_tokens"):
        np.testing.assert_array_equal(res_a.records[key], res_b.records[key], err_msg=key)  # NaN: rejected
    # the lazily decayed statistics, brought up to date, are the eager ones bit for bit (same key order)
    assert inc.nodes.keys() == ref.nodes.keys()
    for h, node in inc.nodes.items():
        cur = inc.statistics.current(node)
        assert list(cur.access.items()) == list(ref.nodes[h].access.items()), f"node {h} access"
        assert list(cur.missed.items()) == list(ref.nodes[h].missed.items()), f"node {h} missed"


def test_the_equivalence_test_sees_decisions():
    """The random runs above do replicate, reclaim and decay entries away (the test is not vacuous):
    one dense fixed example, compared the same way."""
    rng = np.random.default_rng(3)
    specs = [(0.03 * k, _block(rng.integers(0, 3, size=int(rng.integers(1, 7))).tolist())) for k in range(200)]
    specs.append((12.0, _block([9])))  # a quiet period
    events = [(0.05 * k, ("remove" if k % 2 else "insert", k, rng.integers(0, 3, size=3).tolist())) for k in range(60)]
    cfg = CacheManagerConfig(scan_interval_s=0.4, decay=0.7, inter_degree_threshold_s=1e-3, intra_degree_threshold=0.3,
                             reclaim_threshold=0.25, max_replica_share=1.0, lambda_=0.0)
    _, inc = _run(_Incremental, specs, events, cfg, 4, "affinity", 0)
    _, ref = _run(FullRescanManager, specs, events, cfg, 4, "affinity", 0)
    c = inc.counters
    assert c["num_inter_degree_replications"] > 0 and c["num_intra_degree_replications"] > 0, c
    assert c["num_blocks_reclaimed"] > 0, c
    assert inc.log == ref.log and inc.counters == ref.counters
    assert inc.candidates == ref.candidates


def test_linking_a_prefix_inserted_before_its_shape_updates_depths_complete_sets_and_the_queue():
    # workers 2 and 3 (cp1) cache 1-2-3 before any dispatch told the trie its shape: three parentless
    # nodes at depth 0, each a leaf copy on both; the dispatch's shape links them into one path
    sim = Simulator(_workload([(100.0, [90])]), SimConfig(pool=POOL), _calibration(10))
    mgr = GlobalCacheManager(CacheManagerConfig(scan_interval_s=50.0))
    mgr.attach(sim)
    for wid in (2, 3):
        sim.workers[wid].cache.insert((1, 2, 3))
    _trie_matches_caches(sim, mgr)
    assert [mgr.nodes[h].depth for h in (1, 2, 3)] == [0, 0, 0]
    assert mgr.replicator.leaf_copy_nodes == {1, 2, 3}
    sim.workers[3].cache.remove(1)  # worker 3 keeps 2-3 without their head
    mgr.register_prefix((1, 2, 3))
    assert [mgr.nodes[h].depth for h in (1, 2, 3)] == [0, 1, 2]
    assert mgr.complete_holders(3) == {2} and mgr.replica_count(3, 1) == 1
    _trie_matches_caches(sim, mgr)  # depths, complete sets and queue entries against path walks
    assert mgr.replicator.leaf_copy_nodes == {3}


def test_an_entry_exactly_at_the_threshold_is_a_candidate():
    # no decay: the prefix's second and third hits put its access at exactly 2.0 = the intra-degree
    # threshold before the scan at 0.8 s, with one replica: a candidate for both scans (>=, not >)
    specs = [(0.1, _block([0, 0])), (0.5, _block([0, 0])), (0.6, _block([0, 0])), (2.0, _block([1]))]
    cfg = CacheManagerConfig(scan_interval_s=0.4, decay=1.0, inter_degree_threshold_s=1e-3, intra_degree_threshold=2.0,
                             reclaim_threshold=0.5, max_replica_share=1.0, lambda_=0.0)
    _, inc = _run(_Incremental, specs, [], cfg, 8, "affinity", 0)
    _, ref = _run(FullRescanManager, specs, [], cfg, 8, "affinity", 0)
    assert any(v == 2.0 for _, intra in ref.candidates for v in intra.values()), ref.candidates
    assert inc.candidates == ref.candidates and inc.log == ref.log
