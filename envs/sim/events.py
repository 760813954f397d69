"""The simulator's event order: SimPy's ``(time, priority, id)`` key, with the priority below.

One clock (``simpy.Environment.now`` [s]) and one tie-break: at equal simulated time, events run in
:class:`EventPriority` order, then in scheduling order (SimPy's event id).
"""

from __future__ import annotations

from enum import IntEnum


class EventPriority(IntEnum):
    """Order of events at equal simulated time (lower first)."""

    STEP_END = 0
    TRANSFER_END = 1
    RECONFIG = 2
    ARRIVAL = 3
    CONTROL = 4


__all__ = ["EventPriority"]
