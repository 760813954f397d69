"""Value checks shared by the simulator's config dataclasses (``envs/sim/*config*.py``)."""

from __future__ import annotations

import math
import numbers


def is_finite_number(x: object) -> bool:
    """A real number (bool excluded) that is neither NaN nor infinite: the check of every
    simulator config field that must be a finite number."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)
