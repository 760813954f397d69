import pytest

from envs.sim import PoolConfig


def test_default_pool_is_40_gpus_cp4_and_cp2():
    pool = PoolConfig()
    pl = pool.placements()
    assert sum(d for d, _ in pl) == 40
    assert sorted({d for d, _ in pl}) == [2, 4]
    for d, g in pl:
        assert g % d == 0 and g // 8 == (g + d - 1) // 8


def test_counts_composition_places_largest_first():
    pool = PoolConfig(num_gpus=16, composition="cp2x2,cp4x3")
    assert pool.placements() == [(4, 0), (4, 4), (4, 8), (2, 12), (2, 14)]


@pytest.mark.parametrize("composition, message", [
    ("cp4@0,cp4@2,cp8@8", "misaligned"),
    ("cp4@0,cp2@2,cp2@4,cp8@8", "overlaps"),
    ("cp3x1,cp4x3,cp1x1", "not supported"),
    ("cp4x3", "uses 12 GPUs but the pool has 16"),
    ("cp4@0,cp4@4", "uses 8 GPUs but the pool has 16"),
    ("cpfour", "invalid"),
    ("cp16x1", "not supported"),
    ("", "composition is empty"),
    ("cp4x2,,cp4x2", "has an empty item"),  # was silently read as 'cp4x2,cp4x2'
    ("cp4x4,", "has an empty item"),
    # was accepted, then failed late as "CP degree 4 is not supported"
    ("cp4x0,cp2x8", "'cp4x0': the worker count must be >= 1; leave out a degree with no workers \\('cp2x8'\\)"),
])
def test_invalid_compositions(composition, message):
    with pytest.raises(ValueError, match=message):
        PoolConfig(num_gpus=16, composition=composition)


def test_cross_node_rejected_unless_allowed():
    with pytest.raises(ValueError, match="crosses a node"):
        PoolConfig(num_gpus=16, gpus_per_node=4, composition="cp8@0,cp8@8")
    pool = PoolConfig(num_gpus=16, gpus_per_node=4, composition="cp8@0,cp8@8", allow_cross_node=True)
    assert pool.placements() == [(8, 0), (8, 8)]


def test_worker_ids_are_first_gpu_over_min_degree():
    pool = PoolConfig(num_gpus=8, composition="cp4@0,cp2@4,cp2@6", supported_degrees=(2, 4))
    assert [pool.worker_id_for(g) for _, g in pool.placements()] == [0, 2, 3]
    assert pool.max_num_workers == 4
