"""Permutation-equivariant per-worker policy for MaskablePPO (sb3-contrib).

Observation normalisation happens here, inside the policy (the environment reports physical
units): every time feature is scaled as ``log1p(x / 1 s)``, token counts as
``log1p(x / 1024)``, counts as ``log1p(x)``, the CP degree as ``C / 8``; flags and shares stay in
[0, 1]. Two relative features are derived per worker: ``symlog(q_w - min_eligible q)`` and
``symlog(finish_w - min_eligible finish)`` with ``finish = q_w + E_{C_w}(R, P)`` (the quantity
Mooncake-style min-predicted-TTFT routing minimises). Fixed scaling keeps checkpoints
self-contained (no running statistics to ship) and identical in training and evaluation.

Architecture (Deep Sets, Zaheer et al. 2017; per-node scoring as in Decima, Mao et al. 2019):

* a shared MLP ``phi`` embeds every worker from its own features plus the request and pool
  features: ``h_w = phi([x_w, x_req, x_pool])``, shape ``(B, N, H)``;
* pooled context ``g = [mean_w h_w, max_w h_w]`` over present workers, shape ``(B, 2H)``;
* per-worker logit ``l_w = psi([h_w, g])``, shape ``(B, N)`` — the action logits directly (the
  SB3 ``action_net`` is the identity), so permuting worker slots permutes the logits;
* value from ``[g, x_req, x_pool]`` (permutation invariant).

Residual mode (``residual_tau_s`` set): the logits are ``-(J_w - min_eligible J)/tau + psi(...)``
with the Vertumnus placement cost ``J_w = q_w + beta*s_w + lambda*x_w`` (paper §5,
``baselines.vertumnus``; ``x_w`` the extra GPU time of the ``"workers_extra"`` observation key)
and the last layer of ``psi`` initialised to zero, so the untrained policy's most likely action
is Vertumnus's choice (up to float32 rounding of near-equal costs) and PPO learns a correction.
Observations with a ``"context"`` key (time to the window end, recent arrival rate) feed it to
``phi`` and the critic; older checkpoints without it keep their input width.

None of the weights depends on the number of worker slots N, so a checkpoint runs on any pool
size (:mod:`policies.common.numpy_policy`, or a policy rebuilt for the new space).
"""

from __future__ import annotations

import gymnasium as gym
import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from envs.routing_env import CONTEXT_FEATURES, POOL_FEATURES, REQUEST_FEATURES, WORKER_FEATURES

_TIME, _TOKENS, _COUNT, _ID, _DEG = 0, 1, 2, 3, 4


def _kind(name: str, bound: float) -> int:
    if name.endswith("_s"):
        return _TIME
    if "tokens" in name:
        return _TOKENS
    if name == "degree":
        return _DEG
    if bound == 1.0:
        return _ID
    return _COUNT


def _scales(features) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """Per-feature (divisor, use_log, linear) vectors of the fixed normalisation."""
    div, use_log = [], []
    for name, bound in features:
        k = _kind(name, bound)
        div.append({_TIME: 1.0, _TOKENS: 1024.0, _COUNT: 1.0, _ID: 1.0, _DEG: 8.0}[k])
        use_log.append(1.0 if k in (_TIME, _TOKENS, _COUNT) else 0.0)
    return th.tensor(div), th.tensor(use_log), 1.0 - th.tensor(use_log)


def _normalise(x: th.Tensor, div: th.Tensor, use_log: th.Tensor, lin: th.Tensor) -> th.Tensor:
    y = x / div
    return use_log * th.log1p(y.clamp(min=0.0)) + lin * y


def _symlog(x: th.Tensor) -> th.Tensor:
    return th.sign(x) * th.log1p(x.abs())


_W = {name: i for i, (name, _) in enumerate(WORKER_FEATURES)}


class WorkerSetExtractor(BaseFeaturesExtractor):
    """Encodes the ``Dict`` observation of ``PrefillRoutingEnv`` into ``[logits (N), value
    features (H)]``, shape ``(B, N + H)``.

    Args:
        observation_space: the environment's Dict space (``workers`` ``(N, F_w)``,
            ``request`` ``(F_r,)``, ``pool`` ``(F_p,)``).
        hidden_dim: width H of every hidden layer (default 64).
        residual_tau_s: temperature tau [s] of the Vertumnus prior ``-J/tau`` (module docstring);
            ``None`` (default) = no prior (plain per-worker logits).
        residual_beta, residual_lambda: the (beta, lambda) of the prior's cost ``J`` (default 3,
            1 = ``baselines.vertumnus.VertumnusParams``; a tuned pair from ``cpgym tune vertumnus``).

    Raises:
        ValueError: if ``residual_tau_s`` <= 0, or residual mode without ``"workers_extra"``.
    """

    def __init__(self, observation_space: gym.spaces.Dict, hidden_dim: int = 64, residual_tau_s: float | None = None,
                 residual_beta: float = 3.0, residual_lambda: float = 1.0) -> None:
        n, fw = observation_space["workers"].shape
        fr = observation_space["request"].shape[0]
        fp = observation_space["pool"].shape[0]
        self.use_context = "context" in observation_space.spaces
        if self.use_context:
            fp += observation_space["context"].shape[0]
        super().__init__(observation_space, features_dim=n + hidden_dim)
        if residual_tau_s is not None:
            if not residual_tau_s > 0:
                raise ValueError(f"residual_tau_s must be > 0, got {residual_tau_s}")
            if "workers_extra" not in observation_space.spaces:
                raise ValueError("residual policy needs the 'workers_extra' observation key (PrefillRoutingEnv >= cpgym 0.2)")
        self.residual_tau_s = residual_tau_s
        self.residual_beta = float(residual_beta)
        self.residual_lambda = float(residual_lambda)
        self.num_slots = n
        self.hidden_dim = hidden_dim
        pool_feats = POOL_FEATURES + (CONTEXT_FEATURES if self.use_context else ())
        for prefix, feats in (("w", WORKER_FEATURES), ("r", REQUEST_FEATURES), ("p", pool_feats)):
            d, lg, ln = _scales(feats)
            self.register_buffer(f"{prefix}_div", d)
            self.register_buffer(f"{prefix}_log", lg)
            self.register_buffer(f"{prefix}_lin", ln)
        inp = fw + 2 + fr + fp
        h = hidden_dim
        self.phi = nn.Sequential(nn.Linear(inp, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
        self.psi = nn.Sequential(nn.Linear(3 * h, h), nn.ReLU(), nn.Linear(h, 1))
        self.value = nn.Sequential(nn.Linear(2 * h + fr + fp, h), nn.ReLU())

    def forward(self, obs: dict[str, th.Tensor]) -> th.Tensor:
        w = obs["workers"]
        B, N, _ = w.shape
        present = w[..., _W["present"]]  # (B, N)
        eligible = w[..., _W["eligible"]]
        big = 1e9
        q = w[..., _W["outstanding_work_s"]]
        fin = w[..., _W["predicted_finish_s"]]
        q_min = th.where(eligible > 0, q, th.full_like(q, big)).min(dim=1, keepdim=True).values
        f_min = th.where(eligible > 0, fin, th.full_like(fin, big)).min(dim=1, keepdim=True).values
        has = (eligible.sum(dim=1, keepdim=True) > 0).float()
        rel_q = _symlog((q - q_min) * has) * present
        rel_f = _symlog((fin - f_min) * has) * present
        xw = _normalise(w, self.w_div, self.w_log, self.w_lin)
        xr = _normalise(obs["request"], self.r_div, self.r_log, self.r_lin)
        pool = th.cat([obs["pool"], obs["context"]], dim=1) if self.use_context else obs["pool"]
        xp = _normalise(pool, self.p_div, self.p_log, self.p_lin)
        ctx_in = th.cat([xr, xp], dim=1)
        x = th.cat([xw, rel_q.unsqueeze(-1), rel_f.unsqueeze(-1), ctx_in.unsqueeze(1).expand(B, N, ctx_in.shape[1])], dim=2)
        hw = self.phi(x) * present.unsqueeze(-1)  # (B, N, H)
        cnt = present.sum(dim=1, keepdim=True).clamp(min=1.0)
        mean = hw.sum(dim=1) / cnt
        mx = th.where(present.unsqueeze(-1) > 0, hw, th.full_like(hw, -big)).max(dim=1).values
        mx = th.where(cnt > 0, mx, th.zeros_like(mx)) * (present.sum(dim=1, keepdim=True) > 0).float()
        g = th.cat([mean, mx], dim=1)  # (B, 2H)
        logits = self.psi(th.cat([hw, g.unsqueeze(1).expand(B, N, g.shape[1])], dim=2)).squeeze(-1)  # (B, N)
        if self.residual_tau_s is not None:
            logits = logits + self.prior_logits(obs)
        v = self.value(th.cat([g, ctx_in], dim=1))
        return th.cat([logits, v], dim=1)


    def prior_logits(self, obs: dict[str, th.Tensor]) -> th.Tensor:
        """``-(J_w - min_eligible J)/tau`` of shape ``(B, N)``; 0 on ineligible slots."""
        w = obs["workers"]
        eligible = w[..., _W["eligible"]]
        j = (w[..., _W["outstanding_work_s"]] + self.residual_beta * w[..., _W["predicted_service_s"]]
             + self.residual_lambda * obs["workers_extra"][..., 0])
        j_min = th.where(eligible > 0, j, th.full_like(j, 1e9)).min(dim=1, keepdim=True).values
        return th.where(eligible > 0, -(j - j_min) / self.residual_tau_s, th.zeros_like(j))


class _SplitHead(nn.Module):
    """SB3 ``mlp_extractor`` that splits the extractor output into (logits, value features)."""

    def __init__(self, num_slots: int, hidden_dim: int) -> None:
        super().__init__()
        self.num_slots = num_slots
        self.latent_dim_pi = num_slots
        self.latent_dim_vf = hidden_dim

    def forward(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features: th.Tensor) -> th.Tensor:
        return features[:, : self.num_slots]

    def forward_critic(self, features: th.Tensor) -> th.Tensor:
        return features[:, self.num_slots:]


class WorkerSetPolicy(MaskableActorCriticPolicy):
    """MaskablePPO policy whose action logits come per worker from :class:`WorkerSetExtractor`.

    Use as ``MaskablePPO(WorkerSetPolicy, env, policy_kwargs={"features_extractor_kwargs":
    {"hidden_dim": 64}})``. The extractor is shared by actor and critic.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("features_extractor_class", WorkerSetExtractor)
        kwargs["share_features_extractor"] = True
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        fe = self.features_extractor
        self.mlp_extractor = _SplitHead(fe.num_slots, fe.hidden_dim)

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()
        last = self.features_extractor.psi[-1]
        if self.features_extractor.residual_tau_s is not None:
            nn.init.zeros_(last.weight)  # residual: start exactly at the Vertumnus prior
        else:
            nn.init.orthogonal_(last.weight, gain=0.01)
        nn.init.zeros_(last.bias)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)
