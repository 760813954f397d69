"""Industry and paper baselines (paper §9; issue #3): routers, pool compositions and the TP-4 cost form.

Every router chooses among ``PoolView.eligible_worker_ids`` only. Defaults come from the
upstream projects' command-line / chart defaults, named in each class docstring. Block hashes
stand in for text or token ids: one Mooncake block (512 tokens by default) is the unit of every
prefix index below, so "matched characters" of SGLang or "matched blocks" of llm-d become
matched KV blocks of the request.
"""

from baselines.industry.dynamo import ActiveSequences, DynamoKVRouter, DynamoParams
from baselines.industry.llmd import LlmdParams, LlmdRouter
from baselines.industry.mooncake_conductor import MooncakeTTFTRouter
from baselines.industry.prefix_index import ApproxPrefixIndex
from baselines.industry.sglang import SGLangCacheAwareRouter, SGLangParams
from baselines.industry.static import StaticThresholdRouter, default_length_threshold_tokens, homogeneous_composition
from baselines.industry.vllm import TensorParallelCostForm, VllmDPParams, VllmDPRouter

__all__ = [
    "homogeneous_composition", "TensorParallelCostForm", "ApproxPrefixIndex", "SGLangParams",
    "SGLangCacheAwareRouter", "LlmdParams", "LlmdRouter", "ActiveSequences", "DynamoParams", "DynamoKVRouter",
    "MooncakeTTFTRouter", "VllmDPParams", "VllmDPRouter", "default_length_threshold_tokens", "StaticThresholdRouter",
]
