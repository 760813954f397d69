"""The hash of a checkpoint's policy: ``checkpoint_sha256`` of the benchmark's ledger and
leaderboard entries (``benchmark.ledger``, ``experiments.benchmark_specs``).

Two trainings that end with the same weights must give the same hash, so it covers what defines
the policy and nothing else:

* an SB3 model zip (``model.zip``): every tensor of its ``policy.pth`` member (the policy
  network's parameters), in sorted name order, each as its name, dtype, shape and bytes; plus,
  where the checkpoint has observation statistics (``vecnormalize.pkl`` next to it,
  ``policies.common.checkpoint.vecnormalize_path``), each observation key's running mean,
  variance and count (sorted keys) and ``clip_obs`` / ``epsilon``. The zip's other members are
  left out: ``data`` holds the training's ``start_time``, last observations and episode buffers,
  and every member carries the time it was written;
* any other model file (``arm_model.json`` of an arm-selection checkpoint, written with no
  volatile field): the SHA-256 of its bytes (:func:`file_sha256`).

Ledger lines written before this hash (commit ``7265f77`` and earlier) hold the SHA-256 of the
``model.zip`` file itself; every committed leaderboard entry was re-run with this hash.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

from policies.common.checkpoint import load_vecnormalize, vecnormalize_path

#: The member of an SB3 model zip holding the policy network's parameters.
POLICY_MEMBER = "policy.pth"


def file_sha256(path: Path | str) -> str:
    """SHA-256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _update_array(h, name: str, array) -> None:
    import numpy as np

    a = np.ascontiguousarray(np.asarray(array))
    h.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
    h.update(a.tobytes())


def policy_sha256(model_file: Path | str) -> str:
    """SHA-256 (hex) of what defines the policy of the checkpoint whose model file is
    ``model_file`` (module docstring).

    Raises:
        ValueError: naming the file, for a zip without ``policy.pth`` or one torch cannot read.
        OSError: if a file cannot be read.
    """
    p = Path(model_file)
    if not zipfile.is_zipfile(p):
        return file_sha256(p)
    import torch  # lazy: torch (only a model zip's parameters need it)

    with zipfile.ZipFile(p) as z:
        if POLICY_MEMBER not in z.namelist():
            raise ValueError(f"{p}: no {POLICY_MEMBER} member; expected an SB3 model zip written by `cpgym train`")
        try:
            state = torch.load(io.BytesIO(z.read(POLICY_MEMBER)), map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many kinds on a corrupt member
            raise ValueError(f"{p}: {POLICY_MEMBER} is not a readable torch state dict ({type(exc).__name__})") from None
    h = hashlib.sha256(b"cpgym policy sha256 v1\0")
    for name in sorted(state):
        _update_array(h, f"policy.{name}", state[name].detach().cpu().numpy())
    stats = vecnormalize_path(p)
    if stats.is_file():
        vn = load_vecnormalize(stats)
        rms = vn.obs_rms if isinstance(vn.obs_rms, dict) else {"": vn.obs_rms}
        for key in sorted(rms):
            for part in ("mean", "var", "count"):
                _update_array(h, f"obs_rms.{key}.{part}", getattr(rms[key], part))
        _update_array(h, "clip_obs", float(vn.clip_obs))
        _update_array(h, "epsilon", float(vn.epsilon))
    return h.hexdigest()
