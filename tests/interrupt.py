"""A stand-in for a run that is killed midway: the tests of "a run stopped midway keeps what it
already wrote" (``cpgym dynamic``, ``cache-ablation``, ``faults``) replace one run function with it."""

from __future__ import annotations


def fail_on_call(real, n: int, message: str = "killed"):
    """``real`` wrapped so that its ``n``-th call raises ``RuntimeError(message)`` instead of running."""
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise RuntimeError(message)
        return real(*args, **kwargs)

    return wrapped
