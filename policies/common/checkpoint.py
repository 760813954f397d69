"""Loading learned-policy checkpoints: ``model.zip`` (SB3) plus ``train_config.json`` (the
configuration that produced it, next to the zip)."""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

from envs.workloads import WorkloadSource

#: Folder of the checkpoints shipped in the package (``policies/checkpoints/``).
CHECKPOINTS_DIR = Path(__file__).resolve().parents[1] / "checkpoints"
#: The shipped routing checkpoint (``--policy shipped``; see its ``README.md``): the arm-selection
#: router (``policies.routing.arm_selection``), the learned router that is fastest on the test windows of
#: every workload x load cell (``results/learned-routing/README.md``).
SHIPPED_ROUTING = CHECKPOINTS_DIR / "routing_vertumnus_arms"
#: The residual MaskablePPO routing checkpoint (``--policy shipped-residual``; ``shipped`` until the
#: arm-selection router replaced it).
SHIPPED_RESIDUAL = CHECKPOINTS_DIR / "routing_conversation_residual"
#: The shipped reconfiguration checkpoint (``--policy shipped-reconfig``; its README has the
#: training command and evaluation).
SHIPPED_RECONFIG = CHECKPOINTS_DIR / "reconfig_target"
#: Model file of an arm-selection checkpoint (``policies.routing.arm_selection.MODEL_FILE``; kept here
#: so that resolving a checkpoint does not import the router).
ARM_MODEL_FILE = "arm_model.json"
#: ``--policy`` aliases of the shipped checkpoints.
SHIPPED_CHECKPOINTS = {"shipped": SHIPPED_ROUTING, "shipped-residual": SHIPPED_RESIDUAL, "shipped-reconfig": SHIPPED_RECONFIG}


def checkpoint_path(name: str | Path) -> Path:
    """The path a ``--policy`` checkpoint value names: a shipped alias
    (:data:`SHIPPED_CHECKPOINTS`) or the (user-expanded) path itself."""
    return SHIPPED_CHECKPOINTS.get(str(name)) or Path(name).expanduser()


def looks_like_path(name: str) -> bool:
    """Whether a ``--policy`` value is meant as a file path rather than a policy name: it holds a
    path separator, ends in ``.zip`` or starts with ``.`` or ``~``."""
    return "/" in name or os.sep in name or name.endswith(".zip") or name.startswith((".", "~"))


def resolve_checkpoint(path: str | Path) -> tuple[Path, dict]:
    """``(zip path, metadata)`` of a checkpoint folder or zip; ``"shipped"`` = the shipped one.
    For an arm-selection folder (``policies.routing.arm_selection``: ``arm_model.json``, no
    ``model.zip``) the path is that of ``arm_model.json``.

    Raises:
        FileNotFoundError: naming the path, if it does not exist or is a folder without
            ``model.zip``.
        ValueError: naming the file, if the ``train_config.json`` next to it is not valid UTF-8
            JSON.
    """
    p = checkpoint_path(path)
    if not p.exists():
        raise FileNotFoundError(2, "checkpoint path does not exist; expected a checkpoint folder holding model.zip, "
                                   "a model .zip file, or 'shipped'", str(p))
    if p.is_dir():
        z = p / "model.zip"
        meta_path = p / "train_config.json"
        if not z.is_file() and (p / ARM_MODEL_FILE).is_file():  # policies.routing.arm_selection checkpoint (no SB3 model)
            z = p / ARM_MODEL_FILE
        elif not z.is_file():
            raise missing_model_error(p)
    else:
        z = p
        meta_path = p.parent / "train_config.json"
        if not meta_path.exists() and p.parent.name == "checkpoints":
            meta_path = p.parent.parent / "train_config.json"
    return z, current_meta(read_json_file(meta_path)) if meta_path.is_file() else {}


def missing_model_error(folder: Path) -> FileNotFoundError:
    """The error for a checkpoint folder without ``model.zip``: for a ``cpgym train`` run that was
    interrupted (``train_config.json`` marks it, :mod:`policies.common.run_end`) it says so and names the
    zips to evaluate instead (``interrupted_model.zip``, ``best_model.zip``); for a run that
    stopped otherwise, its periodic checkpoints."""
    from policies.common.checkpoint import read_interrupted

    folder = Path(folder)
    interrupted = read_interrupted(folder)
    if interrupted is not None and (folder / str(interrupted.get("model"))).is_file():
        use = [f"{folder / interrupted['model']} (the model when it stopped)"]
        if (folder / "best_model.zip").is_file():
            use.append(f"{folder / 'best_model.zip'} (best validated so far)")
        return FileNotFoundError(2, f"no model.zip: this training was interrupted at {interrupted.get('timesteps')} of "
                                    f"{interrupted.get('total_timesteps')} steps; to use it anyway, give --policy "
                                    + " or ".join(use), str(folder))
    ckpts = sorted((folder / "checkpoints").glob("*.zip")) if (folder / "checkpoints").is_dir() else []
    if (folder / "train_config.json").is_file() and ckpts:
        return FileNotFoundError(2, f"no model.zip: this training did not finish; its latest periodic checkpoint is "
                                    f"{ckpts[-1]} (give that zip as --policy)", str(folder))
    return FileNotFoundError(2, "checkpoint folder has no model.zip; expected the folder written by "
                                "`cpgym train` (model.zip, train_config.json)", str(folder))


def learned_label(model_zip: Path) -> str:
    """The table label of a learned checkpoint's model zip, for routing and reconfiguration alike:
    ``learned:<folder name>`` for a folder's ``model.zip``, ``learned:<zip name without .zip>``
    for another zip (``learned:best_model``, ``learned:interrupted_model``). The ``shipped``
    benchmark spec keeps its own name as its label."""
    z = Path(model_zip)
    return f"learned:{z.expanduser().resolve().parent.name if z.name == 'model.zip' else z.stem}"


# keys of train_config.json renamed since checkpoints were written (#38: one name per window), by
# checkpoint type (the ``policy_type``, else the ``kind``): old -> new
RENAMED_TRAIN_CONFIG_KEYS: dict[str, dict[str, str]] = {
    "reconfig": {"window_s": "decision_window_s"},  # the controller's observation / decision window
    "vertumnus-arms": {"window_s": "episode_window_s"},
}
RENAMED_SOURCE_KEYS = {"window_s": "episode_window_s"}  # of train_config.source (policies.routing.episodes.EpisodeSource)
# the flat workload fields of a train_config (reconfiguration) or its source (routing) written before
# they held a WorkloadSource: flat key -> WorkloadSource field
FLAT_WORKLOAD_FIELDS = {"workload": "name", "trace": "trace", "workload_seed": "seed", "params": "params",
                        "target_rps": "target_rps", "rate_scale": "rate_scale",
                        "arrival_window_s": "arrival_window_s", "skip_invalid": "skip_invalid"}
# WorkloadSource field -> its flat key (the names cache keys of the arm-selection trainer hash)
FLAT_WORKLOAD_KEYS = {v: k for k, v in FLAT_WORKLOAD_FIELDS.items()}


def current_meta(meta: dict) -> dict:
    """A checkpoint's ``train_config.json`` content (``meta``) with the keys of earlier releases
    renamed (:data:`RENAMED_TRAIN_CONFIG_KEYS`, :data:`RENAMED_SOURCE_KEYS`), so that every reader
    sees one spelling, and a reconfiguration ``train_config`` or routing ``source`` of the flat
    shape with its workload fields nested as ``workload`` (:func:`_nested_workload`); ``meta`` itself is left as read. A key
    given in both spellings keeps the new one."""
    tc = meta.get("train_config")
    if not isinstance(tc, dict):
        return meta
    tc = _renamed(tc, RENAMED_TRAIN_CONFIG_KEYS.get(meta.get("policy_type") or meta.get("kind") or "", {}))
    if meta.get("kind") == "reconfig" and not isinstance(tc.get("workload"), dict):
        tc = _nested_workload(tc)
    if isinstance(tc.get("source"), dict):
        tc["source"] = _renamed(tc["source"], RENAMED_SOURCE_KEYS)
        if not isinstance(tc["source"].get("workload"), dict):
            tc["source"] = _nested_workload(tc["source"])
    return {**meta, "train_config": tc}


def _nested_workload(tc: dict) -> dict:
    """A reconfiguration ``train_config`` or a routing ``source`` of the flat shape
    (:data:`FLAT_WORKLOAD_FIELDS`) with its workload fields moved into ``workload``, as ``asdict`` writes its
    :class:`~envs.workloads.WorkloadSource` (a field it predates: the field's default)."""
    out = {k: v for k, v in tc.items() if k not in FLAT_WORKLOAD_FIELDS}
    workload = {f.name: json.loads(json.dumps(f.default)) for f in fields(WorkloadSource)}
    workload.update({FLAT_WORKLOAD_FIELDS[k]: v for k, v in tc.items() if k in FLAT_WORKLOAD_FIELDS})
    out["workload"] = workload
    return out


def _renamed(d: dict, renames: dict[str, str]) -> dict:
    """A copy of ``d`` with each key ``old`` of ``renames`` moved to ``renames[old]`` (unless that is set)."""
    out = dict(d)
    for old, new in renames.items():
        if old in out:
            out.setdefault(new, out.pop(old))
    return out


def read_json_file(path: Path) -> dict:
    """A JSON file's content: a JSON object.

    Raises:
        ValueError: naming the file (and line/column) if it is not UTF-8, not valid JSON or not an
            object (a list read as metadata failed as an AttributeError traceback).
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); expected a JSON file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object, got a JSON {type(doc).__name__}")
    return doc


class LearnedPolicy:
    """A trained MaskablePPO routing model with the SB3 ``predict`` interface and a name.

    Deterministic decisions on one (unbatched) observation use the numpy forward pass of
    :class:`policies.common.numpy_policy.NumpyWorkerSetActor` (tens of microseconds, any number of worker
    slots: a 40-slot checkpoint decides on 32- or 64-worker pools); ``backend="torch"``, batched
    or stochastic calls use the SB3 model (which needs the training number of slots).

    Args:
        path: checkpoint folder or zip (or ``"shipped-residual"``; ``"shipped"`` is an
            arm-selection checkpoint, see below).
        name: label for tables (default ``learned:<folder name>``).
        device: torch device (default cpu).
        backend: ``"numpy"`` (default) or ``"torch"`` for deterministic single decisions.

    Raises:
        FileNotFoundError / ValueError: see :func:`resolve_checkpoint` and :func:`load_model_zip`;
            ValueError on an unknown backend, or naming the path for an arm-selection checkpoint
            (no network; load it with :class:`policies.routing.arm_selection.ArmSelectionPolicy`).
    """

    def __init__(self, path: str | Path, name: str | None = None, device: str = "cpu", backend: str = "numpy") -> None:
        from sb3_contrib import MaskablePPO

        if backend not in ("numpy", "torch"):
            raise ValueError(f"backend must be 'numpy' or 'torch', got {backend!r}")
        z, meta = resolve_checkpoint(path)
        if z.name == ARM_MODEL_FILE:
            raise ValueError(f"{z.parent}: an arm-selection checkpoint ({ARM_MODEL_FILE}, no model.zip); load it with "
                             "policies.routing.arm_selection.ArmSelectionPolicy(path, env)")
        self.path = z
        self.meta = meta
        self.model = load_model_zip(MaskablePPO, z, device)
        self.name = name or learned_label(z)
        self.backend = backend
        self._keys = tuple(self.model.observation_space.spaces)
        # per key: (per worker slot?, shape of one slot / of the key) for check_observation
        self._key_shapes = tuple((k, len(sp.shape) == 2, sp.shape[1:] if len(sp.shape) == 2 else sp.shape)
                                 for k, sp in self.model.observation_space.spaces.items())
        self.actor = None
        if backend == "numpy":
            from policies.common.numpy_policy import NumpyWorkerSetActor  # lazy: gymnasium (start-up of the CLI)

            self.actor = NumpyWorkerSetActor(self.model.policy.features_extractor)

    def predict(self, observation, state=None, episode_start=None, deterministic: bool = True, action_masks=None):
        """SB3 signature; returns ``(action, state)``. Keys the model was not trained with
        (newer environment versions) are dropped before the torch path. ``action_masks`` has one
        entry per worker slot of ``observation["workers"]``: shape ``(num_slots,)`` for one
        observation, ``(batch, num_slots)`` for a batch (any shape of that size, as in SB3).

        Raises:
            ValueError: naming ``action_masks``, its shape and the expected one, on a mask of
                another size (was a numpy ``IndexError`` or torch "shape '[1, 40]' is invalid");
                naming the key, on an observation that is not a dict, lacks a key of the model or
                has an array of another shape (:meth:`check_observation`); naming the slot counts,
                on a call for the SB3 model (a batch, ``deterministic=False`` or ``backend="torch"``)
                with another number of worker slots than the model's (it failed inside SB3 with
                "cannot reshape array of size 384 into shape (40,12)").
        """
        import math

        import numpy as np

        self.check_observation(observation)
        if action_masks is not None:
            expected = np.shape(observation["workers"])[:-1]
            if np.shape(action_masks) != expected:
                if np.size(action_masks) != math.prod(expected):
                    raise ValueError(f"action_masks of shape {np.shape(action_masks)} does not fit the observation: "
                                     f"expected {expected} (one entry per worker slot of observation['workers'], shape "
                                     f"{np.shape(observation['workers'])})")
                action_masks = np.reshape(action_masks, expected)
        if self.actor is not None and deterministic and np.ndim(observation["workers"]) == 2:
            return np.int64(self.actor.act(observation, action_masks)), state
        slots, model_slots = np.shape(observation["workers"])[-2], self.model.observation_space.spaces["workers"].shape[0]
        if slots != model_slots:
            raise ValueError(f"observation['workers'] has {slots} worker slots and the model {model_slots}: a batch, "
                             "deterministic=False or backend='torch' run the SB3 model, which needs its training slot "
                             "count; one observation with deterministic=True and backend='numpy' decides on any pool")
        obs = {k: observation[k] for k in self._keys}
        return self.model.predict(obs, state=state, episode_start=episode_start,
                                  deterministic=deterministic, action_masks=action_masks)


    def check_observation(self, observation) -> None:
        """Checks that ``observation`` is one routing observation (or a batch of them) this
        model can decide on: a dict holding the model's keys, ``"workers"`` of shape
        ``(num_slots, F)`` or ``(batch, num_slots, F)`` with the model's ``F``, and every other key
        of the model's shape for that batch and slot count (any ``num_slots`` on the numpy path).

        Raises:
            ValueError: naming the key, its shape and the expected one (a missing key was a
                ``KeyError``, a wrong shape a numpy broadcasting error from inside the forward pass).
        """
        from collections.abc import Mapping

        import numpy as np

        if not isinstance(observation, Mapping):
            raise ValueError(f"observation must be a dict with keys {list(self._keys)} (a PrefillRoutingEnv "
                             f"observation), got {type(observation).__name__}")
        missing = [k for k in self._keys if k not in observation]
        if missing:
            raise ValueError(f"observation lacks key(s) {missing}; the model was trained on keys {list(self._keys)}")
        ws = tuple(np.shape(observation["workers"]))
        nf = self.model.observation_space.spaces["workers"].shape[-1]
        if len(ws) not in (2, 3) or ws[-1] != nf:
            raise ValueError(f"observation['workers'] of shape {ws} does not fit the model: expected (num_slots, {nf}) "
                             f"or (batch, num_slots, {nf})")
        slot_lead, batch_lead = ws[:-1], ws[:-2]  # (batch,) num_slots / (batch,)
        for key, per_slot, shape in self._key_shapes:
            expected = (slot_lead if per_slot else batch_lead) + shape
            got = np.shape(observation[key])
            if got != expected:
                raise ValueError(f"observation[{key!r}] of shape {tuple(got)} does not fit the model: expected {expected} "
                                 f"(observation['workers'] has shape {ws})")


def load_model_zip(algorithm, path: Path, device: str = "cpu"):
    """``algorithm.load(path, device=device)`` (an SB3 algorithm class) with a corrupt file
    reported by name: the one loader of SB3 checkpoints (routing and reconfiguration evaluation,
    ``joint:`` routers, ``--init-from``).

    Raises:
        ValueError: ``PATH: not a readable SB3 checkpoint zip (...)``, one line, if it is not a zip
            archive or not one SB3 can load (members missing or corrupt).
        OSError: if the file cannot be opened.
    """
    import pickle
    import zipfile

    if not zipfile.is_zipfile(path):  # SB3 would raise its own multi-line "wasn't a zip-file" ValueError
        raise ValueError(f"{path}: not a readable SB3 checkpoint zip (not a zip archive); "
                         "expected the model.zip written by `cpgym train`")
    try:
        return algorithm.load(path, device=device, custom_objects=moved_classes(path))
    # an archive without SB3's members fails its `assert data is not None` or a member lookup; a
    # corrupt member fails in zipfile, json (ValueError), pickle or torch.load (RuntimeError)
    except (zipfile.BadZipFile, EOFError, KeyError, AssertionError, ValueError, RuntimeError,
            pickle.UnpicklingError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise ValueError(f"{path}: not a readable SB3 checkpoint zip ({type(exc).__name__}: {detail}); "
                         "expected the model.zip written by `cpgym train`") from None


#: Modules of policy classes that moved since a checkpoint could have been saved: ``{old module:
#: (new module, class name)}``. SB3 pickles the policy class by module path, so a zip saved before
#: the move names a module that no longer exists (``policies.extractor`` became
#: ``policies.common.extractor`` when ``policies/`` was split into common/routing/reconfig).
MOVED_POLICY_MODULES = {"policies.extractor": ("policies.common.extractor", "WorkerSetPolicy")}


def moved_classes(path: Path) -> dict:
    """SB3 ``custom_objects`` for a checkpoint zip whose pickled ``policy_class`` names a module of
    :data:`MOVED_POLICY_MODULES`: ``{"policy_class": the class at its new path}``; ``{}`` otherwise
    (or when the zip's ``data`` member cannot be read: SB3's own load then reports it)."""
    import base64
    import importlib
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            data = json.loads(zf.read("data"))
        blob = base64.b64decode(data["policy_class"][":serialized:"])
    except (KeyError, TypeError, ValueError, OSError, zipfile.BadZipFile):
        return {}
    for old, (new, name) in MOVED_POLICY_MODULES.items():
        if old.encode() in blob and (old + "_").encode() not in blob:
            module = importlib.import_module(new)  # lazy: torch (the policy class)
            return {"policy_class": getattr(module, name)}
    return {}


def vecnormalize_path(model_zip: Path) -> Path:
    """The ``VecNormalize`` statistics saved with a reconfiguration model: ``X_model.zip`` ->
    ``X_vecnormalize.pkl`` (``model.zip`` -> ``vecnormalize.pkl``); for another zip name the
    folder's ``vecnormalize.pkl``."""
    name = model_zip.name
    return model_zip.with_name(name[:-len("model.zip")] + "vecnormalize.pkl" if name.endswith("model.zip")
                               else "vecnormalize.pkl")


def load_vecnormalize(path: Path):
    """The pickled SB3 ``VecNormalize`` (saved without its environments: only the statistics)
    at ``path``.

    Raises:
        ValueError: ``PATH: not a readable VecNormalize pickle (...)``, one line, if it cannot be
            unpickled or holds something else.
        OSError: if the file cannot be opened.
    """
    import pickle

    with open(path, "rb") as fh:
        try:
            obj = pickle.load(fh)
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, TypeError, ValueError) as exc:
            detail = " ".join(str(exc).split())[:200]
            raise ValueError(f"{path}: not a readable VecNormalize pickle ({type(exc).__name__}: {detail}); "
                             "expected the vecnormalize.pkl written by `cpgym train reconfig`") from None
    if not (hasattr(obj, "obs_rms") and hasattr(obj, "ret_rms")):
        raise ValueError(f"{path}: not a readable VecNormalize pickle (holds a {type(obj).__name__}); "
                         "expected the vecnormalize.pkl written by `cpgym train reconfig`")
    return obj


def read_interrupted(folder: Path) -> dict | None:
    """The ``"interrupted"`` entry of ``folder/train_config.json`` (``None``: no such file, not
    readable, or the run was not interrupted)."""
    p = Path(folder) / "train_config.json"
    try:
        entry = json.loads(p.read_text(encoding="utf-8")).get("interrupted")
    except (OSError, ValueError, AttributeError):
        return None
    return entry if isinstance(entry, dict) else None
