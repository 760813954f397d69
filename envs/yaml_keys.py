"""Duplicate mapping keys in YAML: PyYAML keeps the last of two equal keys without a word (YAML 1.2
says keys are unique), so a repeated ``events:`` or ``sweep:`` block silently replaced the first.
The readers of the project's YAML files (sweep specs, fault schedules, fault-study specs) refuse
them with :func:`check_unique_keys`."""

from __future__ import annotations

from typing import Any

_MERGE_TAG = "tag:yaml.org,2002:merge"


def duplicate_key(node: Any) -> tuple[Any, Any, Any] | None:
    """The first key given twice in one mapping anywhere under a composed node
    (``yaml.compose``): ``(key, first key node, repeated key node)``, or None. Merge keys
    (``<<``) are not counted: keys after a merge override the merged ones on purpose."""
    import yaml

    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, yaml.MappingNode):
            seen: dict = {}
            for k, v in n.value:
                stack.append(v)
                if k.tag == _MERGE_TAG or not isinstance(k, yaml.ScalarNode):
                    continue
                key = yaml.safe_load(yaml.serialize(k))
                try:
                    first = seen.setdefault(key, k)
                except TypeError:  # an unhashable key: PyYAML itself refuses it later
                    continue
                if first is not k:
                    return key, first, k
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(reversed(n.value))
    return None


def check_unique_keys(node: Any, source: str) -> None:
    """Raises ``ValueError("SOURCE:LINE:COLUMN: key 'K' given twice in one mapping (first on line
    L); expected each key once")`` for the first repeated key under ``node`` (1-based line and
    column of the repetition)."""
    dup = duplicate_key(node)
    if dup is None:
        return
    key, first, again = dup
    raise ValueError(f"{source}:{again.start_mark.line + 1}:{again.start_mark.column + 1}: key {key!r} given twice "
                     f"in one mapping (first on line {first.start_mark.line + 1}); expected each key once")
