"""Per-episode accounting of the Gymnasium environments: the incremental time-in-system and
SLO-miss sums behind their rewards, and the classification of an episode's end as terminated
or truncated (Gymnasium semantics). Imports neither gymnasium nor torch.
"""

from __future__ import annotations

import math

from envs.sim import Request, Simulator


class EpisodeAccounting:
    """Incremental time-in-system and SLO-miss bookkeeping of one episode.

    O(1) per decision and O(batch) per engine-step end (a finish listener added only by the
    environments, so ``cpgym simulate`` does not pay for it). ``n`` counts routed, unfinished
    requests; ``num_admitted`` the requests routed at least once.
    """

    __slots__ = ("n", "last_s", "acc_s", "miss_tokens", "handoff_s_per_token", "first_decode_s", "arrival",
                 "finished_count", "finished_tokens", "num_admitted", "sim")

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.n = 0
        self.last_s = 0.0
        self.acc_s = 0.0
        self.miss_tokens = 0
        self.finished_count = 0
        self.finished_tokens = 0
        self.num_admitted = 0
        cfg = sim.config
        # Same expressions as Simulator.__init__ / _on_step_end, so the sums match TTFT exactly.
        self.handoff_s_per_token = sim.calibration.kv_bytes_per_token / cfg.latency.kv_handoff_bandwidth_bytes_per_s
        self.first_decode_s = cfg.latency.first_decode_step_s
        self.arrival = [r.arrival_time_s for r in sim.workload.requests]

    def admit(self, req: Request, now: float) -> None:
        """The request is routed for the first time at ``now``: charge its time since arrival and
        the constant hand-off + first-decode terms of its TTFT, then count it in the system."""
        self.acc_s += self.n * (now - self.last_s)
        self.last_s = now
        self.acc_s += (now - req.arrival_time_s) + (req.num_prompt_tokens * self.handoff_s_per_token + self.first_decode_s)
        self.n += 1
        self.num_admitted += 1

    def on_finish(self, sim: Simulator, batch: list, _w) -> None:
        now = sim.env.now
        self.acc_s += self.n * (now - self.last_s)
        self.last_s = now
        self.n -= len(batch)
        self.finished_count += len(batch)
        arrival = self.arrival
        h = self.handoff_s_per_token
        fd = self.first_decode_s
        slo = sim.ttft_slo_s
        for req in batch:
            rid = req.request_id
            L = req.num_prompt_tokens
            self.finished_tokens += L
            if now - arrival[rid] + L * h + fd > slo(rid):
                self.miss_tokens += L

    def collect(self, now: float) -> tuple[float, int]:
        """Returns and clears (time-in-system [s], missed SLO tokens) accumulated up to ``now``."""
        self.acc_s += self.n * (now - self.last_s)
        self.last_s = now
        out = (self.acc_s, self.miss_tokens)
        self.acc_s = 0.0
        self.miss_tokens = 0
        return out

    def num_unrouted(self) -> int:
        """Requests of the workload never routed and not rejected as unroutable: arrivals still
        ahead, waiting for a decision, or parked for lack of an ACTIVE worker."""
        sim = self.sim
        return sim.workload.num_requests - self.num_admitted - sim.num_rejected

    def episode_end(self) -> tuple[bool, bool, float]:
        """``(terminated, truncated, end_s)`` of an episode whose simulator has stopped
        (``Simulator.done``).

        Gymnasium semantics: *truncated* when ``SimConfig.horizon_s`` stopped the run while work
        remained — an arrival not yet routed (still ahead, waiting for a decision, or parked) or
        a routed request unfinished — so the return is cut short and a learner should bootstrap;
        *terminated* otherwise (every request finished or was rejected as unroutable, a true end
        of the episode's MDP). ``end_s`` is where the time-in-system integral stops: the horizon
        for a truncation, else the time of the last event.
        """
        sim = self.sim
        now = sim.env.now
        horizon_cut = sim.env.peek() < math.inf  # stopped with events left: only the horizon does that
        if horizon_cut and (self.n > 0 or self.num_unrouted() > 0):
            return False, True, max(now, sim.config.horizon_s)
        return True, False, now
