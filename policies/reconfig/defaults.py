"""Defaults shared by reconfiguration training and evaluation (one definition each)."""

from __future__ import annotations

#: Named workload of a reconfiguration training given
#: neither a trace nor a workload: the paper's dynamic scenarios below saturation (every phase at
#: 0.4-0.8 of its mix's measured capacity; the shipped ``reconfig_target`` checkpoint's workload).
#: It was ``phases``, whose default 90 / 18 req/s is past the default pool's capacity (100+ s TTFTs
#: for every policy: the comparison measured backlog drain, issue #14); checkpoints whose
#: ``train_config.json`` names no workload were trained on ``phases`` (:data:`LEGACY_WORKLOAD`).
DEFAULT_RECONFIG_WORKLOAD = "matched-phases"


#: The workload of a reconfiguration checkpoint whose ``train_config.json`` names none.
LEGACY_WORKLOAD = "phases"
