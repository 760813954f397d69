"""Fast single-decision inference of a :class:`~policies.extractor.WorkerSetExtractor` in numpy.

A routing decision needs the actor logits of one observation. Running the SB3 policy for that
costs ~1 ms (tensor conversion, distribution objects, autograd bookkeeping); the same forward pass
as a handful of float32 numpy matrix products on the ``(N, F)`` worker matrix costs tens of
microseconds at 40 workers (``cpgym bench-env`` measures it). The weights are copied once from
the torch module; the arithmetic mirrors :meth:`WorkerSetExtractor.forward` step by step (a test
checks that both give the same logits and actions).

None of the weights depends on the number of worker slots, so the same weights decide on pools of
any size (a 40-GPU checkpoint on 32- or 64-GPU pools).
"""

from __future__ import annotations

import numpy as np

from envs.routing_env import WORKER_FEATURES

_W = {name: i for i, (name, _) in enumerate(WORKER_FEATURES)}
_BIG = np.float32(1e9)


def _symlog(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.log1p(np.abs(x))


class NumpyWorkerSetActor:
    """The actor of a :class:`~policies.extractor.WorkerSetExtractor` as numpy arrays.

    Args:
        extractor: the trained torch extractor (weights are copied, float32).
    """

    def __init__(self, extractor) -> None:
        def arr(t):
            return t.detach().cpu().numpy().astype(np.float32)

        # per-feature 1/divisor and the columns that get log1p (WorkerSetExtractor's fixed scaling)
        self.scales = {p: (1.0 / arr(getattr(extractor, f"{p}_div")), np.flatnonzero(arr(getattr(extractor, f"{p}_log"))))
                       for p in ("w", "r", "p")}
        self.phi = [(arr(m.weight).T.copy(), arr(m.bias)) for m in extractor.phi if hasattr(m, "weight")]
        self.psi = [(arr(m.weight).T.copy(), arr(m.bias)) for m in extractor.psi if hasattr(m, "weight")]
        self.use_context = bool(getattr(extractor, "use_context", False))
        self.residual_tau_s = getattr(extractor, "residual_tau_s", None)
        self.residual_beta = np.float32(getattr(extractor, "residual_beta", 3.0))
        self.residual_lambda = np.float32(getattr(extractor, "residual_lambda", 1.0))
        self.hidden_dim = int(extractor.hidden_dim)
        (w1, b1), (w2, b2) = self.psi
        # psi([h_w, g]) = relu(h_w @ W1[:H] + (g @ W1[H:] + b1)) @ W2 + b2: the g part once, not per worker
        self._psi_h, self._psi_g, self._psi_b1 = w1[: self.hidden_dim].copy(), w1[self.hidden_dim:].copy(), b1
        self._psi_w2, self._psi_b2 = w2[:, 0].copy(), float(b2[0])

    def _norm(self, x: np.ndarray, prefix: str) -> np.ndarray:
        inv_div, log_cols = self.scales[prefix]
        y = x * inv_div
        y[..., log_cols] = np.log1p(np.maximum(y[..., log_cols], 0.0))
        return y

    def logits(self, obs: dict) -> np.ndarray:
        """Actor logits of one (unbatched) observation: shape ``(N,)`` for ``workers`` ``(N, F)``.
        Empty slots get logits too; mask them with the environment's action mask."""
        w = np.asarray(obs["workers"], dtype=np.float32)
        n = w.shape[0]
        present = w[:, _W["present"]]
        eligible = w[:, _W["eligible"]] > 0
        q = w[:, _W["outstanding_work_s"]]
        fin = w[:, _W["predicted_finish_s"]]
        if eligible.any():
            rel_q = _symlog(q - q[eligible].min()) * present
            rel_f = _symlog(fin - fin[eligible].min()) * present
        else:
            rel_q = np.zeros(n, np.float32)
            rel_f = np.zeros(n, np.float32)
        pool = np.asarray(obs["pool"], dtype=np.float32)
        if self.use_context:
            pool = np.concatenate([pool, np.asarray(obs["context"], dtype=np.float32)])
        ctx = np.concatenate([self._norm(np.asarray(obs["request"], dtype=np.float32), "r"), self._norm(pool, "p")])
        x = np.empty((n, w.shape[1] + 2 + ctx.shape[0]), dtype=np.float32)
        x[:, : w.shape[1]] = self._norm(w, "w")
        x[:, w.shape[1]] = rel_q
        x[:, w.shape[1] + 1] = rel_f
        x[:, w.shape[1] + 2:] = ctx
        h = x
        for wt, b in self.phi:
            h = np.maximum(h @ wt + b, 0.0)
        h *= present[:, None]
        pres = present > 0
        if pres.any():
            mean = h.sum(axis=0) / max(float(present.sum()), 1.0)
            mx = h[pres].max(axis=0)
        else:
            mean = np.zeros(self.hidden_dim, np.float32)
            mx = np.zeros(self.hidden_dim, np.float32)
        g = np.concatenate([mean, mx])
        z = np.maximum(h @ self._psi_h + (g @ self._psi_g + self._psi_b1), 0.0)
        out = z @ self._psi_w2 + np.float32(self._psi_b2)
        if self.residual_tau_s is not None and eligible.any():
            j = q + self.residual_beta * w[:, _W["predicted_service_s"]] + self.residual_lambda * np.asarray(
                obs["workers_extra"], dtype=np.float32)[:, 0]
            out = out + np.where(eligible, -(j - j[eligible].min()) / np.float32(self.residual_tau_s), 0.0)
        return out.astype(np.float32)

    def act(self, obs: dict, action_mask: np.ndarray | None = None) -> int:
        """The most likely action among the masked-in slots (ties: lowest slot)."""
        lg = self.logits(obs)
        if action_mask is not None:
            lg = np.where(np.asarray(action_mask, dtype=bool), lg, -np.inf)
        return int(np.argmax(lg))
