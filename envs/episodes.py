"""Episode windows of the Gymnasium environments: a workload cut into consecutive windows
(episodes), their deterministic train/eval split, the default scenario of the registered
routing id, the checked ``reset`` options and the copy rules shared by both environments.
Imports neither gymnasium nor torch.
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Mapping, Sequence

from envs import workloads
from envs.sim import Calibration, SimConfig, Workload

#: Default scenario of the registered routing id: conversation trace at this rate [requests/s].
DEFAULT_TARGET_RPS = 12.0
#: Default episode window [s].
DEFAULT_WINDOW_S = 60.0


#: Keys of ``reset(options=...)`` of both environments.
RESET_OPTIONS = ("window_index", "sim_seed")


def reset_options(options: Mapping | None, num_windows: int) -> tuple[int | None, int | None]:
    """``(window_index, sim_seed)`` of an environment's ``reset(options=...)`` (``None`` where a
    key is absent).

    Raises:
        ValueError: naming the key, on a key other than :data:`RESET_OPTIONS` (a misspelt key was
            ignored: a random window instead of the chosen one), a value that is not an integer
            (``1.7`` was truncated, ``True`` read as 1), a ``window_index`` outside
            ``[0, num_windows)`` or a negative ``sim_seed``.
    """
    if options is None:
        return None, None
    if not isinstance(options, Mapping):
        raise ValueError(f"options must be a dict with keys {list(RESET_OPTIONS)}, got {options!r}")
    unknown = sorted(str(k) for k in options if k not in RESET_OPTIONS)
    if unknown:
        raise ValueError(f"options: unknown key(s) {unknown}; accepted: {list(RESET_OPTIONS)}")
    out = []
    for key in RESET_OPTIONS:
        v = options.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
            raise ValueError(f"options['{key}'] must be an integer, got {v!r}")
        out.append(None if v is None else int(v))
    idx, sim_seed = out
    if idx is not None and not 0 <= idx < num_windows:
        raise ValueError(f"options['window_index'] must be in [0, {num_windows}), got {idx}")
    if sim_seed is not None and sim_seed < 0:
        raise ValueError(f"options['sim_seed'] must be an integer >= 0, got {sim_seed}")
    return idx, sim_seed


def episode_windows(workload: Workload, episode_window_s: float) -> list[Workload]:
    """Cuts a workload into consecutive windows of ``episode_window_s`` seconds (episodes),
    dropping empty ones. Uses ``envs.workloads.windows`` (arrival times re-based to the window start).

    Raises:
        ValueError: if ``episode_window_s`` <= 0 or no window holds a request.
    """
    if not episode_window_s > 0:
        raise ValueError(f"episode_window_s must be > 0, got {episode_window_s}")
    wins = [w for w in workloads.windows(workload, episode_window_s) if w.num_requests > 0]
    if not wins:
        raise ValueError(f"workload {workload.name!r} has no request in any window of {episode_window_s} s")
    return wins


def split_windows(wins: Sequence[Workload], part: str, eval_every: int = 4) -> list[Workload]:
    """Deterministic train/eval split of episode windows: every ``eval_every``-th window
    (indices 3, 7, 11, ... for 4) is held out for evaluation, the others train.

    Args:
        part: ``"train"``, ``"eval"`` or ``"all"``.

    Raises:
        ValueError: on an unknown part, ``eval_every`` < 2, or an empty result.
    """
    if eval_every < 2:
        raise ValueError(f"eval_every must be >= 2, got {eval_every}")
    if part == "all":
        out = list(wins)
    elif part == "train":
        out = [w for i, w in enumerate(wins) if i % eval_every != eval_every - 1]
    elif part == "eval":
        out = [w for i, w in enumerate(wins) if i % eval_every == eval_every - 1]
    else:
        raise ValueError(f"part must be 'train', 'eval' or 'all', got {part!r}")
    if not out:
        raise ValueError(f"no {part} window among {len(wins)} windows (eval_every={eval_every})")
    return out


def nonempty_windows(workloads: Workload | Sequence[Workload]) -> list[Workload]:
    """The non-empty episode windows of a workload or a sequence of them.

    Raises:
        ValueError: if no window holds a request, or naming ``workloads`` if it is neither a
            ``Workload`` nor a sequence of them (a workload name such as ``"tool-agent"`` failed
            with "'str' object has no attribute 'num_requests'").
    """
    if isinstance(workloads, Workload):
        ws = [workloads]
    elif isinstance(workloads, Sequence) and not isinstance(workloads, str) and all(
            isinstance(w, Workload) for w in workloads):
        ws = list(workloads)
    else:
        raise ValueError(f"workloads must be an envs.sim.Workload or a sequence of them (e.g. "
                         f"envs.workloads.get_workload('tool-agent') or build_workload(trace=PATH)), got "
                         f"{_short_repr(workloads)}")
    ws = [w for w in ws if w.num_requests > 0]
    if not ws:
        raise ValueError("workloads: no episode window holds a request")
    return ws


def _short_repr(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def check_env_arguments(config, calibration, **flags) -> None:
    """Type checks of the constructor arguments both environments share: ``config`` a
    ``SimConfig`` or ``None``, ``calibration`` a ``Calibration`` or ``None``, and every keyword
    of ``flags`` (``observe_faults=...``) a bool.

    Raises:
        ValueError: naming the argument and what was expected (``config={}`` silently meant the
            default config, a dict failed later with "'dict' object has no attribute ...", a
            calibration file name failed at ``reset``, ``observe_faults="no"`` meant True).
    """
    import numpy as np

    if config is not None and not isinstance(config, SimConfig):
        raise ValueError(f"config must be an envs.sim.SimConfig or None, got {_short_repr(config)}")
    if calibration is not None and not isinstance(calibration, Calibration):
        raise ValueError("calibration must be an envs.sim.Calibration or None (for a calibration file: "
                         f"Calibration.load(PATH) or SimConfig(calibration_path=PATH)), got {_short_repr(calibration)}")
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{name} must be a bool, got {value!r}")


def default_routing_windows() -> list[Workload]:
    """Default episodes of the registered routing id (the shipped checkpoint's scenario): the
    training windows (:func:`split_windows`) of :data:`DEFAULT_WINDOW_S`-second windows of the
    Mooncake conversation trace time-scaled to :data:`DEFAULT_TARGET_RPS` requests/s, where the
    40-GPU default pool is loaded (~0.9 utilisation under least-work) and the heuristics differ."""
    wl = workloads.build_workload(trace=workloads.default_trace_path(), target_rps=DEFAULT_TARGET_RPS)
    return split_windows(episode_windows(wl, DEFAULT_WINDOW_S), "train")


class PickleBeforeReset:
    """Copy rules of both environments (a mixin): ``pickle`` works before ``reset()`` (Gymnasium's
    env checker and the env factories of ``SubprocVecEnv`` pickle a fresh env); after ``reset()``
    the env holds a SimPy ``Environment`` whose bound event classes do not survive unpickling
    (``pickle.loads`` failed with "'Environment' object has no attribute 'Process'"), so pickling
    then raises a ``TypeError`` that says what to do instead. ``copy.deepcopy`` works at any time.
    """

    def __getstate__(self) -> dict:
        if getattr(self, "sim", None) is not None:
            raise TypeError(f"{type(self).__name__} cannot be pickled after reset(): its SimPy simulator does not "
                            f"survive unpickling. Pickle it before reset(), rebuild it and reset() with the same "
                            f"seed and options (episodes are deterministic), or use copy.deepcopy in-process")
        return self.__dict__.copy()

    def __deepcopy__(self, memo: dict):
        new = object.__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = copy.deepcopy(value, memo)
        return new
