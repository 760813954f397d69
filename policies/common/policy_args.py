"""Checks of ``--policy`` / ``--against`` values shared by routing and reconfiguration evaluation:
a checkpoint path, a shipped name or a registered heuristic."""

from __future__ import annotations

from baselines.registry import POLICIES
from policies.common.checkpoint import SHIPPED_CHECKPOINTS, looks_like_path, resolve_checkpoint


def is_checkpoint(name: str) -> bool:
    """Whether a ``--policy`` value names a checkpoint (``"shipped"``, a ``.zip`` or a folder)."""
    from pathlib import Path

    return name in SHIPPED_CHECKPOINTS or name.endswith(".zip") or Path(name).expanduser().is_dir()


def check_checkpoint_kind(policy: str, kind: str) -> None:
    """Raises ValueError (one line) when ``policy`` is a checkpoint whose ``train_config.json``
    ``kind`` is not ``kind`` (e.g. a routing checkpoint on a reconfiguration task), before the
    model is loaded; heuristics and checkpoints without a recorded kind pass.

    Raises:
        ValueError: naming the checkpoint, its kind and the kind asked for.
        FileNotFoundError: for a checkpoint path that does not exist.
    """
    if policy in ("none", "-") or not is_checkpoint(policy):
        return

    _, meta = resolve_checkpoint(policy)
    trained = meta.get("kind")
    if trained is not None and trained != kind:
        # --kind is gone (evaluate runs a benchmark task): the hint names the task kind to pick
        raise ValueError(f"--policy {policy} is a {trained} checkpoint (train_config.json kind {trained!r}), not a {kind} "
                         f"one; evaluate it on a {trained} task (`cpgym benchmark list`)")


def check_policy_argument(name: str) -> None:
    """Validates a policy given on the command line: a registered heuristic, ``"shipped"``, or an
    existing checkpoint folder / ``.zip``.

    Raises:
        FileNotFoundError: naming the path, for a checkpoint path that does not exist (a value
            holding a path separator or ending in ``.zip``) or a folder without ``model.zip``.
        ValueError: naming the path, for an existing file that is not a ``.zip`` (with or without a
            path separator); for an unknown
            name: suggests the closest names (``difflib``) and names the
            accepted forms (``shipped``, checkpoint paths, the registered policies).
    """
    import difflib
    from pathlib import Path

    if name in POLICIES:
        return
    if is_checkpoint(name) or looks_like_path(name) or Path(name).expanduser().exists():  # README.md: a file, not a name
        resolve_checkpoint(name)
        if not is_checkpoint(name):  # an existing file that is neither a folder nor a .zip
            raise ValueError(f"{name}: not a checkpoint; expected a checkpoint folder holding model.zip, "
                             "a model .zip file, or 'shipped'")
        return

    close = difflib.get_close_matches(name, [*SHIPPED_CHECKPOINTS, *POLICIES], n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise ValueError(f"unknown policy {name!r}; {hint}expected 'shipped' (the shipped routing checkpoint), 'shipped-residual' "
                     f"(the residual PPO routing checkpoint), 'shipped-reconfig' "
                     f"(the shipped reconfiguration checkpoint), a checkpoint folder or .zip path "
                     f"(e.g. policies/checkpoints/routing_conversation_residual), "
                     f"or a registered policy: {', '.join(POLICIES)}")


def check_distinct(values, flag: str, text=None, expected: str = "distinct values (each is one episode)") -> None:
    """Seeds and window indices name episodes (or repetitions): a repeated one would count the same
    run twice (a narrower, fake confidence interval).

    Raises:
        ValueError: ``FLAG lists X twice: TEXT; expected EXPECTED`` (``TEXT``: ``text``, or the
            values joined by commas).
    """
    seen = set()
    for v in values:
        if v in seen:
            shown = text if text is not None else ",".join(map(str, values))
            raise ValueError(f"{flag} lists {v!r} twice: {shown!r}; expected {expected}")
        seen.add(v)
