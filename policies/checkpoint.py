"""Loading learned-policy checkpoints: ``model.zip`` (SB3) plus ``train_config.json`` (the
configuration that produced it, next to the zip)."""

from __future__ import annotations

import json
from pathlib import Path

#: The shipped routing checkpoint (see ``policies/checkpoints/README.md``).
SHIPPED_ROUTING = Path(__file__).resolve().parent / "checkpoints" / "routing_conversation"


def resolve_checkpoint(path: str | Path) -> tuple[Path, dict]:
    """``(zip path, metadata)`` of a checkpoint folder or zip; ``"shipped"`` = the shipped one.

    Raises:
        FileNotFoundError: if no ``model.zip`` / zip exists there.
    """
    p = SHIPPED_ROUTING if str(path) == "shipped" else Path(path)
    if p.is_dir():
        z = p / "model.zip"
        meta_path = p / "train_config.json"
    else:
        z = p
        meta_path = p.parent / "train_config.json"
        if not meta_path.exists() and p.parent.name == "checkpoints":
            meta_path = p.parent.parent / "train_config.json"
    if not z.is_file():
        raise FileNotFoundError(f"checkpoint not found: {z}")
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    return z, meta


class LearnedPolicy:
    """A trained MaskablePPO routing model with the SB3 ``predict`` interface and a name.

    Args:
        path: checkpoint folder or zip (or ``"shipped"``).
        name: label for tables (default ``learned:<folder name>``).
        device: torch device (default cpu).
    """

    def __init__(self, path: str | Path, name: str | None = None, device: str = "cpu") -> None:
        from sb3_contrib import MaskablePPO

        z, meta = resolve_checkpoint(path)
        self.path = z
        self.meta = meta
        self.model = MaskablePPO.load(z, device=device)
        self.name = name or f"learned:{z.parent.name if z.name == 'model.zip' else z.stem}"

    def predict(self, observation, state=None, episode_start=None, deterministic: bool = True, action_masks=None):
        return self.model.predict(observation, state=state, episode_start=episode_start,
                                  deterministic=deterministic, action_masks=action_masks)
