"""The cpgym benchmark: named, versioned tasks with sealed splits, one evaluation protocol, tuned
baselines, a test-run ledger and a validated leaderboard (issue #39).

Layer: ``experiments > policies > benchmark > baselines > envs`` (``pyproject.toml``'s import-linter
contracts): tasks and the protocol run heuristics (``baselines``) and anything with SB3's
``predict``; the learned policies (``policies``) train on the tasks' training splits.
"""

from benchmark.protocol import evaluate

__all__ = ["evaluate"]
