"""The tuned heuristic split/merge controller ``vertumnus-adaptive-tuned``: ``vertumnus-adaptive``
(paper §6, ``baselines.registry``) with the parameters of a tuning file written by
``python -m experiments.tune_controller`` (the selection from a sweep: :mod:`experiments.tune_controller`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from baselines.registry import get_policy

#: The heuristic whose parameters are tuned, and the label of the tuned one in evaluations.
HEURISTIC = "vertumnus-adaptive"
TUNED_LABEL = "vertumnus-adaptive-tuned"

def tunable_params() -> dict:
    """The tunable parameters of ``vertumnus-adaptive`` and their defaults: the registry's own
    ``PolicySpec.params`` (``baselines/registry.py`` ``adaptive_spec``: every ``ControllerConfig``
    field, the look-ahead's ``LookaheadConfig`` fields as ``lookahead.<field>``, and the router's
    ``beta`` / ``lambda``), so this module keeps no second list of them."""
    return dict(get_policy(HEURISTIC).params)


def default_params(names) -> dict:
    defaults = tunable_params()
    return {k: defaults[k] for k in names}


def load_tuned_controller(path: str | Path) -> dict:
    """The ``params`` of a tuned-controller file written by :func:`main`.

    Raises:
        ValueError: naming the file (and field), when it is missing, not JSON, not a
            ``vertumnus-adaptive`` tuning, or its params are not that policy's parameters.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--tuned {p}: no such file; expected the JSON written by `python -m experiments.tune_controller`")
    try:
        doc = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p}: not JSON ({exc}); expected the file written by "
                         "`python -m experiments.tune_controller`") from None
    if not isinstance(doc, dict) or doc.get("heuristic") != HEURISTIC or not isinstance(doc.get("params"), dict):
        raise ValueError(f"{p}: expected an object with \"heuristic\": \"{HEURISTIC}\" and a \"params\" object "
                         "(the file written by `python -m experiments.tune_controller`)")
    unknown = sorted(set(doc["params"]) - set(tunable_params()))
    if unknown:
        raise ValueError(f"{p}: params.{unknown[0]} is not a parameter of {HEURISTIC} (a ControllerConfig field, "
                         f"lookahead.<LookaheadConfig field>, beta or lambda; baselines/registry.py)")
    return dict(doc["params"])


def tuned_controller_spec(path: str | Path):
    """The ``vertumnus-adaptive`` policy with the tuned parameters of ``path``, named
    ``vertumnus-adaptive-tuned`` (a :class:`baselines.registry.PolicySpec`).

    Raises:
        ValueError: as :func:`load_tuned_controller`, or naming the file when a value is out of
            range (``ControllerConfig`` validation).
    """
    params = {k: tuple(v) if isinstance(v, list) else v for k, v in load_tuned_controller(path).items()}  # JSON lists
    try:
        spec = get_policy(HEURISTIC).with_params(**params)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: params: {exc}") from None
    return replace(spec, name=TUNED_LABEL)


__all__ = ["HEURISTIC", "TUNED_LABEL", "default_params", "load_tuned_controller", "tunable_params", "tuned_controller_spec"]
