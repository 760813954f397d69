"""What the benchmark evaluates: :class:`Contender` (a policy with its label) and the heuristic
SPEC strings of ``cpgym benchmark run --policy SPEC`` (issue #39, CLI).

SPEC forms resolved here (the heuristics, ``baselines.registry``):

* ``NAME`` — a registered policy (``get_policy``);
* ``NAME:param=value,param=value`` — the same with parameters changed (``PolicySpec.with_params``;
  values are read as ``true``/``false``, integers, floats, else strings);
* ``tuned:NAME`` — the task's stored tuned parameters (``benchmark.tuned.load_tuned``);
  ``tuned:fixed`` — a reconfiguration task's best fixed composition chosen on its training split
  (``benchmark.references``);
* ``fixed:COMPOSITION`` — no reconfiguration on another fixed composition of the task's GPUs
  (``vertumnus-router`` on it; ``+`` stands for ``,`` in a mixed one: ``fixed:cp8x2+cp4x6``);
* ``oracle:best-fixed``, ``oracle:per-phase`` — a reconfiguration task's hindsight oracles
  (``benchmark.references``: not attainable, marked so on the leaderboard).

Checkpoints and ``shipped`` (the shipped learned policy for the task's kind) need ``policies``,
which sits above this layer: ``experiments.benchmark_specs.resolve_spec`` resolves every form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from baselines.registry import POLICIES, PolicySpec, get_policy
from benchmark.references import ORACLE_PREFIX, is_oracle_spec, oracle_runner
from benchmark.tasks import Task
from benchmark.tuned import load_tuned
from envs.sim.config import SimConfig
from envs.sim.request import Workload

#: Prefix of a SPEC naming the task's stored tuned parameters.
TUNED_PREFIX = "tuned:"
#: Prefix of a SPEC naming a fixed composition (routed by ``vertumnus-router``, never reconfigured).
FIXED_PREFIX = "fixed:"
#: The router of a ``fixed:`` composition.
REFERENCE_ROUTER = "vertumnus-router"


@dataclass(frozen=True)
class EpisodeRunner:
    """A policy that runs a whole episode itself: ``run(workload, sim_config) -> SimResult``."""

    name: str
    run: Callable[[Workload, SimConfig], object]


@dataclass(frozen=True)
class Contender:
    """A policy as the protocol (``benchmark.protocol``) runs it.

    Args:
        label: the ``policy`` field of its rows (the SPEC it came from, e.g. ``tuned:vertumnus-router``).
        policy: a ``PolicySpec``, an object with ``predict``, a callable ``obs -> action`` or an
            :class:`EpisodeRunner`.
        spec: the SPEC string that re-creates it (``cpgym benchmark validate``); ``None`` for an
            object given from Python.
        checkpoint_sha256: the hash of its checkpoint's policy, if it has one
            (``policies.common.checkpoint_hash.policy_sha256``: the same for the same weights).

    Raises:
        ValueError: on an empty label or a policy of none of these kinds.
    """

    label: str
    policy: object
    spec: str | None = None
    checkpoint_sha256: str | None = None

    def __post_init__(self) -> None:
        if not self.label:
            raise ValueError("Contender: label must be a non-empty string")
        if not (isinstance(self.policy, (PolicySpec, EpisodeRunner)) or hasattr(self.policy, "predict")
                or callable(self.policy)):
            raise ValueError(f"Contender {self.label!r}: expected a PolicySpec, an object with predict(obs, state, "
                             f"episode_start, deterministic), a callable obs -> action or an EpisodeRunner, got "
                             f"{type(self.policy).__name__}")


def parse_value(text: str):
    """A parameter value of a SPEC: ``true``/``false``, an int, a float, else the string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def parse_params(spec: str, text: str) -> dict:
    """``"a=1,b=2"`` -> ``{"a": 1, "b": 2}``.

    Raises:
        ValueError: naming ``spec``, on an item without ``=``, an empty name or a repeated name.
    """
    out: dict = {}
    for item in text.split(","):
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq or not name or not value.strip():
            raise ValueError(f"--policy {spec}: expected NAME:param=value[,param=value...], got {item!r}")
        if name in out:
            raise ValueError(f"--policy {spec}: parameter {name!r} given twice")
        out[name] = parse_value(value)
    return out


def with_params(spec: str, policy: PolicySpec, params: dict) -> PolicySpec:
    """``policy.with_params(**params)``, an unknown parameter reported in one line naming ``spec``
    and listing the known ones.

    Raises:
        ValueError: on an unknown parameter or a value the policy refuses.
    """
    unknown = sorted(set(params) - set(policy.params))
    if unknown:
        known = ", ".join(sorted(policy.params)) or "none"
        raise ValueError(f"--policy {spec}: {policy.name} has no parameter {unknown[0]!r}; its parameters: {known}")
    for name, value in params.items():  # a number parameter given a word: name it, not the float() failure
        old = policy.params[name]
        if isinstance(old, (int, float)) and not isinstance(old, bool) and isinstance(value, str):
            raise ValueError(f"--policy {spec}: {name}: expected a number, got {value!r}")
        if not isinstance(old, (int, float, str, tuple)) and old is not None:  # e.g. a settings object
            raise ValueError(f"--policy {spec}: {name} is a {type(old).__name__} and cannot be set in a SPEC")
    try:
        return policy.with_params(**params)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--policy {spec}: {exc}") from None


def tuned_contender(task: Task, name: str) -> Contender | None:
    """``tuned:NAME`` on ``task``: the registered policy with the task's stored tuned parameters,
    or ``None`` when none are stored."""
    params = load_tuned(task, name)
    if params is None:
        return None
    spec = TUNED_PREFIX + name
    return Contender(spec, with_params(spec, get_policy(name), params), spec=spec)


def is_heuristic_spec(text: str) -> bool:
    """Whether ``text`` is one of this module's SPEC forms (a registered name, with parameters,
    ``tuned:`` a registered name, ``fixed:`` or ``oracle:``)."""
    name = text[len(TUNED_PREFIX):] if text.startswith(TUNED_PREFIX) else text.split(":", 1)[0]
    return text in POLICIES or name in POLICIES or text.startswith(FIXED_PREFIX) or text == TUNED_PREFIX + "fixed" \
        or is_oracle_spec(text)


def fixed_composition(text: str) -> str:
    """``fixed:cp8x2+cp4x6`` -> ``cp8x2,cp4x6``."""
    return text[len(FIXED_PREFIX):].replace("+", ",")


def heuristic_contender(text: str, task: Task) -> Contender:
    """The :class:`Contender` of a heuristic SPEC (module docstring) on ``task``.

    Raises:
        ValueError: one line naming the SPEC: an unknown policy (with the known ones), an unknown
            parameter (with the policy's parameters), a ``tuned:`` policy without stored
            parameters for the task (with the command that tunes it), an unknown oracle or an
            oracle on a routing task.
    """
    text = text.strip()
    if text in POLICIES:
        return Contender(text, get_policy(text), spec=text)
    if text.startswith(FIXED_PREFIX):
        if task.kind == "routing":  # a routing task's pool is part of the task
            raise ValueError(f"--policy {text}: task {task.id} is a routing task, whose pool is part of the task; "
                             "fixed:COMPOSITION is for reconfiguration tasks")
        comp = fixed_composition(text)
        try:
            replace(task.sim_config().pool, composition=comp).placements()
        except ValueError as exc:
            raise ValueError(f"--policy {text}: {exc}") from None
        return Contender(text, replace(get_policy(REFERENCE_ROUTER), name=text, composition=comp), spec=text)
    if is_oracle_spec(text):  # hindsight: every candidate composition on the episode (benchmark.references)
        return Contender(text, EpisodeRunner(text, oracle_runner(task, text[len(ORACLE_PREFIX):])), spec=text)
    if text == TUNED_PREFIX + "fixed":  # the best fixed composition chosen on training (benchmark.references)
        params = load_tuned(task, "fixed")
        if params is None:
            raise ValueError(f"--policy {text}: task {task.id} has no stored best fixed composition; "
                             f"run `cpgym benchmark tune fixed --tasks {task.id}`")
        comp = params["composition"]
        return Contender(text, replace(get_policy(REFERENCE_ROUTER), name=text, composition=comp), spec=text)
    if text.startswith(TUNED_PREFIX):
        name = text[len(TUNED_PREFIX):]
        try:
            get_policy(name)  # unknown name: one line with the known ones
        except ValueError as exc:
            raise ValueError(f"--policy {text}: {exc}") from None
        c = tuned_contender(task, name)
        if c is None:
            raise ValueError(f"--policy {text}: task {task.id} has no stored tuned parameters of {name}; "
                             f"run `cpgym benchmark tune {name} --tasks {task.id}`")
        return c
    name, sep, params = text.partition(":")
    policy = get_policy(name)
    if not sep:
        return Contender(text, policy, spec=text)
    spec = with_params(text, policy, parse_params(text, params))
    if spec.check_pool is not None:  # e.g. a full system's initial_composition that does not fit the task's pool
        try:
            spec.check_pool(task.sim_config().pool)
        except ValueError as exc:
            raise ValueError(f"--policy {text}: {exc}") from None
    return Contender(text, spec, spec=text)


def reference_contender(task: Task) -> Contender:
    """The task's reference (``task.reference``): ``tuned:NAME`` with the stored parameters, or
    while none are stored the registered ``NAME`` labelled ``NAME (untuned)``; any other
    reference is a heuristic SPEC."""
    ref = task.reference
    if ref.startswith(TUNED_PREFIX):
        name = ref[len(TUNED_PREFIX):]
        c = tuned_contender(task, name)
        return c if c is not None else Contender(f"{name} (untuned)", get_policy(name), spec=name)
    return heuristic_contender(ref, task)
