"""Every ``cpgym benchmark run --policy SPEC`` form (issue #39, CLI), resolved for one task.

* a registered heuristic, ``NAME:param=value,...`` or ``tuned:NAME``: ``benchmark.specs``;
* ``shipped``: the shipped learned policy for the task's kind — routing: the arm-selection router
  (``policies/checkpoints/routing_vertumnus_arms``), reconfiguration: the learned controller
  (``policies/checkpoints/reconfig_target``);
* a checkpoint path (a folder or model zip written by ``cpgym train``; ``shipped-residual`` /
  ``shipped-reconfig`` name the other shipped ones): an arm-selection checkpoint runs its router
  like a heuristic, a MaskablePPO routing checkpoint acts through the task's routing environment,
  a reconfiguration checkpoint through the reconfiguration environment with its saved
  observation statistics.

A checkpoint's kind must be the task's (a routing checkpoint on a reconfiguration task is an
error). The resolved :class:`benchmark.specs.Contender` carries the hash of the checkpoint's
policy (the ledger's ``checkpoint_sha256``: ``policies.common.checkpoint_hash.policy_sha256``, the
same for the same weights).
"""

from __future__ import annotations

from benchmark.specs import Contender, EpisodeRunner, heuristic_contender, is_heuristic_spec
from benchmark.tasks import Task
from policies.common.checkpoint import SHIPPED_CHECKPOINTS, LearnedPolicy, checkpoint_path, resolve_checkpoint
from policies.common.checkpoint_hash import policy_sha256
from policies.common.policy_args import check_checkpoint_kind, check_policy_argument, is_checkpoint, looks_like_path
from policies.routing.arm_selection import arm_policy_spec, is_arm_checkpoint

#: ``shipped`` per task kind: the checkpoint alias it stands for.
SHIPPED_BY_KIND = {"routing": "shipped", "reconfig": "shipped-reconfig"}


def _checkpoint_contender(spec: str, alias: str, task: Task) -> Contender:
    check_checkpoint_kind(alias, task.kind)  # before a model of the other kind is loaded
    model_file, _ = resolve_checkpoint(alias)
    sha = policy_sha256(model_file)
    path = checkpoint_path(alias)
    if task.kind == "reconfig":
        from policies.reconfig.evaluate import LearnedReconfig  # lazy: gymnasium (start-up of the CLI)

        learned = LearnedReconfig(alias, name=spec)

        def run(workload, config, learned=learned):
            return learned.run(workload, config, config.seed)[0]

        return Contender(spec, EpisodeRunner(spec, run), spec=spec, checkpoint_sha256=sha)
    if is_arm_checkpoint(path):
        return Contender(spec, arm_policy_spec(path, name=spec), spec=spec, checkpoint_sha256=sha)
    return Contender(spec, LearnedPolicy(alias, name=spec), spec=spec, checkpoint_sha256=sha)


def resolve_spec(spec: str, task: Task) -> Contender:
    """The :class:`~benchmark.specs.Contender` of ``spec`` on ``task`` (module docstring),
    labelled ``spec``.

    Raises:
        ValueError: one line naming the SPEC: an unknown policy or parameter, no stored tuned
            parameters, a checkpoint of the other kind.
        FileNotFoundError: naming the path, for a checkpoint path that does not exist.
    """
    spec = str(spec).strip()
    if not spec:
        raise ValueError("--policy: expected a SPEC (a policy name, NAME:param=value,..., tuned:NAME, shipped or a "
                         "checkpoint path), got ''")
    if spec == "shipped":
        return _checkpoint_contender(spec, SHIPPED_BY_KIND[task.kind], task)
    if is_heuristic_spec(spec):
        return heuristic_contender(spec, task)
    if spec in SHIPPED_CHECKPOINTS or is_checkpoint(spec) or looks_like_path(spec):
        check_policy_argument(spec)  # a missing path, or an existing file that is not a checkpoint
        return _checkpoint_contender(spec, spec, task)
    if ":" in spec:
        return heuristic_contender(spec, task)  # NAME:... with an unknown NAME: one line with the known names
    check_policy_argument(spec)  # unknown name: "did you mean", the accepted forms
    raise AssertionError("unreachable: check_policy_argument accepted an unknown policy")  # pragma: no cover


def resolve_specs(specs: list[str], task: Task) -> list[Contender]:
    """:func:`resolve_spec` of each SPEC, in order.

    Raises:
        ValueError: as :func:`resolve_spec`, or on a SPEC given twice.
    """
    seen = [s for s in specs if specs.count(s) > 1]
    if seen:
        raise ValueError(f"--policy {seen[0]} is given twice")
    return [resolve_spec(s, task) for s in specs]
