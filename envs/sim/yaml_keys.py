"""Duplicate mapping keys in YAML: PyYAML keeps the last of two equal keys without a word (YAML 1.2
says keys are unique), so a repeated ``events:`` or ``sweep:`` block silently replaced the first.
The readers of the project's YAML files (sweep specs, fault schedules, fault-study specs) refuse
them with :func:`check_unique_keys`."""

from __future__ import annotations

import re
from typing import Any

_MERGE_TAG = "tag:yaml.org,2002:merge"

#: A plain scalar in exponent notation without a decimal point (``1e9``, ``-2E-3``): a float in
#: YAML 1.2 and JSON, but text to PyYAML's YAML 1.1 resolver, whose float needs a dot (``1.0e+9``).
_EXPONENT_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$")


def safe_loader() -> type:
    """A ``yaml.SafeLoader`` subclass that also reads ``1e9`` as the float 1e9 (YAML 1.2 / JSON):
    with PyYAML's own resolver ``time_s: 1e4`` or ``rates: [2e1]`` became the strings '1e4' /
    '2e1' and failed as "got str '2e1'; expected a number". Pass it as ``Loader=`` to
    ``yaml.load`` / ``yaml.compose`` (the project's YAML readers do); ``yaml.SafeLoader`` itself
    is left unchanged."""
    global _SAFE_LOADER
    if _SAFE_LOADER is None:
        import yaml

        class SafeLoader12(yaml.SafeLoader):
            pass

        SafeLoader12.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789"))
        _SAFE_LOADER = SafeLoader12
    return _SAFE_LOADER


_SAFE_LOADER: type | None = None


def load(text: str) -> Any:
    """``yaml.safe_load`` with :func:`safe_loader`'s exponent floats."""
    import yaml

    return yaml.load(text, Loader=safe_loader())


def compose(text: str) -> Any:
    """``yaml.compose`` with :func:`safe_loader`'s exponent floats (node tags resolved as in :func:`load`)."""
    import yaml

    return yaml.compose(text, Loader=safe_loader())


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
