"""Fast single-decision inference of a :class:`~policies.common.extractor.WorkerSetExtractor` in numpy.

A routing decision needs the actor logits of one observation. Running the SB3 policy for that
costs ~1 ms (tensor conversion, distribution objects, autograd bookkeeping); the same forward pass
as a handful of float32 numpy matrix products on the ``(N, F)`` worker matrix costs ~0.1 ms at
40 slots on one CPU thread (``cpgym bench env`` measures it; ~35 numpy calls of 1-4 us each). The weights are copied once from
the torch module; the arithmetic mirrors :meth:`WorkerSetExtractor.forward` step by step (a test
checks that both give the same logits and actions).

None of the weights depends on the number of worker slots, so the same weights decide on pools of
any size (a 40-GPU checkpoint on 32- or 64-GPU pools).
"""

from __future__ import annotations

import numpy as np

from envs.routing_env import WORKER_FEATURES

_W = {name: i for i, (name, _) in enumerate(WORKER_FEATURES)}
_PRESENT, _ELIGIBLE, _Q, _S = _W["present"], _W["eligible"], _W["outstanding_work_s"], _W["predicted_service_s"]
#: columns of (q_w, predicted finish) whose offsets from the eligible minimum are symlog-scaled
_Q_FIN = [_Q, _W["predicted_finish_s"]]


class NumpyWorkerSetActor:
    """The actor of a :class:`~policies.common.extractor.WorkerSetExtractor` as numpy arrays.

    Args:
        extractor: the trained torch extractor (weights are copied, float32).

    An instance reuses its input and pooling buffers between calls (no per-decision allocation of
    them), so it is not safe to share between threads; use one per thread.
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
        # per-decision constants: worker scaling, and request + pool (+ context) scaling as one vector
        self._w_inv, self._w_log = self.scales["w"]
        self._ctx_inv = np.concatenate([self.scales["r"][0], self.scales["p"][0]])
        self._ctx_log = np.concatenate([self.scales["r"][1], self.scales["r"][0].shape[0] + self.scales["p"][1]])
        self._x: np.ndarray | None = None
        self._g = np.empty(2 * self.hidden_dim, dtype=np.float32)

    def _input_buffer(self, n: int, fw: int) -> np.ndarray:
        """The reused ``(n, fw + 2 + context)`` float32 input matrix of ``phi`` (one per slot count)."""
        x = self._x
        if x is None or x.shape[0] != n:
            x = self._x = np.empty((n, fw + 2 + self._ctx_inv.shape[0]), dtype=np.float32)
        return x

    def logits(self, obs: dict) -> np.ndarray:
        """Actor logits of one (unbatched) observation: shape ``(N,)`` for ``workers`` ``(N, F)``.
        Empty slots get logits too; mask them with the environment's action mask."""
        w = np.asarray(obs["workers"], dtype=np.float32)
        n, fw = w.shape
        x = self._input_buffer(n, fw)  # (N, F + 2 + ctx), reused across calls
        present = w[:, _PRESENT]
        eligible = w[:, _ELIGIBLE] > 0
        any_eligible = bool(eligible.any())
        xw = x[:, :fw]
        np.multiply(w, self._w_inv, out=xw)
        xw[:, self._w_log] = np.log1p(np.maximum(xw[:, self._w_log], 0.0))
        if any_eligible:
            qf = w[:, _Q_FIN]  # (N, 2): outstanding work, predicted finish
            rel = qf - qf[eligible].min(axis=0)
            x[:, fw:fw + 2] = np.sign(rel) * np.log1p(np.abs(rel)) * present[:, None]
        else:
            x[:, fw:fw + 2] = 0.0
        parts = (obs["request"], obs["pool"], obs["context"]) if self.use_context else (obs["request"], obs["pool"])
        c = np.concatenate(parts, dtype=np.float32)
        c *= self._ctx_inv
        c[self._ctx_log] = np.log1p(np.maximum(c[self._ctx_log], 0.0))
        x[:, fw + 2:] = c
        h = x
        for wt, b in self.phi:
            h = h @ wt
            h += b
            np.maximum(h, 0.0, out=h)
        h *= present[:, None]
        # pooled context [mean, max] over present workers; h >= 0 (ReLU) and empty slots are 0, so
        # the max over all slots equals the max over present ones (0 when none is present)
        g = self._g
        hd = self.hidden_dim
        np.sum(h, axis=0, out=g[:hd])
        g[:hd] /= max(float(present.sum()), 1.0)
        np.max(h, axis=0, out=g[hd:])
        z = h @ self._psi_h
        z += g @ self._psi_g + self._psi_b1
        np.maximum(z, 0.0, out=z)
        out = z @ self._psi_w2 + np.float32(self._psi_b2)
        if self.residual_tau_s is not None and any_eligible:
            j = w[:, _Q] + self.residual_beta * w[:, _S] + self.residual_lambda * np.asarray(
                obs["workers_extra"], dtype=np.float32)[:, 0]
            j -= j[eligible].min()
            j /= -np.float32(self.residual_tau_s)
            out += np.where(eligible, j, np.float32(0.0))
        return out  # float32: every operand is float32

    def act(self, obs: dict, action_mask: np.ndarray | None = None) -> int:
        """The most likely action among the masked-in slots (ties: lowest slot)."""
        lg = self.logits(obs)  # a fresh array: masked in place
        if action_mask is not None:
            lg[~np.asarray(action_mask, dtype=bool)] = -np.inf
        return int(np.argmax(lg))
