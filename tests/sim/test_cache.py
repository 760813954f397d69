from hypothesis import given, settings
from hypothesis import strategies as st

from envs.sim import PENDING, READY, PrefixCache


def test_hit_is_leading_ready_run():
    c = PrefixCache(10)
    c.insert([1, 2, 3])
    assert c.match_ready([1, 2, 3, 4]) == 3
    assert c.match_ready([1, 9, 3]) == 1
    c.set_state(2, PENDING)
    assert c.match_ready([1, 2, 3]) == 1
    assert c.match_present([1, 2, 3]) == 3
    c.insert([1, 2])  # recomputed -> ready again
    assert c.state(2) == READY


def test_lru_evicts_tail_blocks_before_shared_head():
    c = PrefixCache(4)
    c.insert([1, 2, 3])
    c.insert([1, 5, 6])  # head 1 refreshed; over capacity by 1 -> evict the LRU tail block 3 first
    assert 1 in c and 5 in c and 6 in c
    assert len(c) == 4
    c.insert([7, 8])
    assert len(c) == 4 and 1 in c  # head of the most recent multi-block prefix survives longest


def test_pinned_blocks_are_not_evicted_and_listeners_see_changes():
    c = PrefixCache(2, worker_id=7)
    seen = []
    c.insert_listeners.append(lambda w, h: seen.append(("+", w, h)))
    c.evict_listeners.append(lambda w, h: seen.append(("-", w, h)))
    c.insert([1])
    c.pin(1)
    c.insert([2])
    c.insert([3])
    assert 1 in c and 3 in c and 2 not in c
    assert ("-", 7, 2) in seen and ("+", 7, 3) in seen


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 12), st.lists(st.lists(st.integers(0, 20), min_size=1, max_size=8), max_size=40))
def test_cache_never_over_capacity_and_listeners_consistent(cap, inserts):
    c = PrefixCache(cap)
    mirror = set()
    c.insert_listeners.append(lambda w, h: mirror.add(h))
    c.evict_listeners.append(lambda w, h: mirror.discard(h))
    for hs in inserts:
        c.insert(list(dict.fromkeys(hs)))
        assert len(c) <= cap
        assert mirror == set(c.blocks())


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 12), st.lists(st.tuples(st.integers(0, 15), st.sampled_from([READY, PENDING])), max_size=14),
       st.booleans())
def test_fill_is_one_insert_per_block_or_refuses(cap, blocks, prefilled):
    # a split/merge loads a new worker's cache in one call; it must leave the state (contents,
    # recency, states) and the listener calls of inserting the blocks one by one, LRU first, and
    # refuse (changing nothing) whenever that would evict: a non-empty cache, repeated hashes, or
    # more blocks than the capacity
    def make():
        c, calls = PrefixCache(cap, worker_id=3), []
        if prefilled and cap:
            c.insert([99])
        c.insert_listeners.append(lambda w, h: calls.append((w, h)))
        return c, calls

    one, one_calls = make()
    for h, state in blocks:
        one.insert((h,), state)
    bulk, bulk_calls = make()
    before = bulk.blocks()
    if bulk.fill(blocks):
        assert not (prefilled and cap) and len({h for h, _ in blocks}) == len(blocks) <= cap
        assert bulk.blocks() == one.blocks() and bulk_calls == one_calls
        assert [bulk.state(h) for h in bulk.blocks()] == [one.state(h) for h in one.blocks()]
    else:
        assert (prefilled and cap) or len({h for h, _ in blocks}) < len(blocks) or len(blocks) > cap
        assert bulk.blocks() == before and bulk_calls == []
