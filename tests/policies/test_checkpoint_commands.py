"""The retraining commands shipped with the learned checkpoints (``policies/checkpoints/*/README.md``
and the ``argv`` of their ``train_config.json``) still parse, with today's ``cpgym train`` parser,
into the stored training config (nothing is trained): a renamed or removed flag, a flag that now
means something else, or a changed default the command relies on fails here.

``train arms`` (``routing_vertumnus_arms``) has its own test (``test_arm_checkpoint.py``).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict
from pathlib import Path

import pytest

from policies.common.checkpoint import current_meta

CHECKPOINTS = Path(__file__).resolve().parents[2] / "policies" / "checkpoints"

#: Fields holding a path: compared by file name (the READMEs use placeholders such as ``S1/`` or
#: ``$T``, and the trace folder depends on where the checkout is).
PATH_FIELDS = ("trace", "init_from", "oracle_phase_ttft")

#: (checkpoint, index of the `cpgym train` command in its README, config file it must give,
#: stored value -> today's spelling, value of a field the stored config predates when it is not
#: the default, exact: the stored config has every field of today's config).
CASES = [
    # reconfig_target's stored configs predate fields added since (their defaults are what it ran with)
    ("reconfig_target", 0, "stage1_train_config.json", {}, {}, False),
    ("reconfig_target", 1, "train_config.json", {}, {}, False),
    # predates --train-prediction-noise (no noise then; the default is now 0.1)
    ("routing_conversation_residual", 0, "train_config.json", {}, {"train_prediction_noise": 0.0}, False),
]


def _expand_elided_list(token: str) -> str:
    """``0,1,2,...,59`` -> ``0,1,...,59`` written out (the READMEs elide long seed lists)."""
    m = re.fullmatch(r"(\d+),(\d+)(?:,\d+)*,\.\.\.,(\d+)", token)
    if m is None:
        return token
    first, second, last = map(int, m.groups())
    return ",".join(map(str, range(first, last + 1, second - first)))


def readme_train_commands(readme: Path) -> list[list[str]]:
    """The argv (``train KIND ...``) of every training command in the README's indented code
    blocks: ``cpgym train ...`` or ``python -m policies.reconfig.train ...`` (the same command),
    continuation lines joined, ``# comments`` and leading ``VAR=value`` dropped, ``$VAR`` of an
    earlier ``VAR=value`` line substituted, elided lists (``0,1,2,...,59``) written out."""
    lines, buf = [], ""
    for raw in readme.read_text().splitlines():
        if not raw.startswith("    ") and not buf:
            continue
        buf += raw.strip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        lines.append(buf)
        buf = ""
    commands, variables = [], {}
    for line in lines:
        tokens = shlex.split(line, comments=True)
        while tokens and re.fullmatch(r"[A-Z_]+=\S*", tokens[0]):
            name, value = tokens.pop(0).split("=", 1)
            variables[name] = value
        tokens = [variables.get(t[1:], t) if t.startswith("$") else t for t in tokens]
        if tokens[:2] == ["cpgym", "train"]:
            commands.append(tokens[1:])
        elif tokens[:3] == ["python", "-m", "policies.reconfig.train"]:
            commands.append(["train", "reconfig", *tokens[3:]])
    return [[_expand_elided_list(t) for t in c] for c in commands]


def _parsed_config(argv: list[str]) -> dict:
    from experiments.cli import build_parser
    from experiments.commands.train import configs_from_args

    return json.loads(json.dumps(asdict(configs_from_args(build_parser().parse_args(argv))), default=str))


def _by_name(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            v = _by_name(v)
        elif k in PATH_FIELDS and v is not None:
            v = Path(v).name
        out[k] = v
    return out


def _expected(stored: dict, default: dict, renamed: dict, former: dict) -> dict:
    """Today's config that reproduces ``stored``: its values (old spellings renamed), and for
    fields it predates the value they had then (``former``, else today's default)."""
    out = {}
    for k, v in default.items():
        if k not in stored:
            out[k] = former.get(k, v)
        elif isinstance(v, dict):
            out[k] = _expected(stored[k], v, renamed, former)
        else:
            out[k] = renamed[k].get(stored[k], stored[k]) if k in renamed else stored[k]
    return out


@pytest.mark.parametrize("name, index, config_file, renamed, former, exact", CASES,
                         ids=[f"{c[0]}-{c[2].removesuffix('.json')}" for c in CASES])
def test_readme_command_parses_to_the_stored_config(name, index, config_file, renamed, former, exact):
    meta = current_meta(json.loads((CHECKPOINTS / name / config_file).read_text()))  # keys renamed since: new names
    argv = readme_train_commands(CHECKPOINTS / name / "README.md")[index]
    assert argv[1] == meta["kind"]
    default = _by_name(_parsed_config(["train", meta["kind"], "--out", "unused"]))
    stored = _by_name(meta["train_config"])
    if exact:  # the stored config has every field: it must be reproduced as it is
        assert set(stored) == set(default)
    assert _by_name(_parsed_config(argv)) == _expected(stored, default, renamed, former)
    # the pool is a simulator flag (not in train_config): the episodes' start composition
    from envs.sim.pool import DEFAULT_COMPOSITION

    composition = argv[argv.index("--pool-composition") + 1] if "--pool-composition" in argv else DEFAULT_COMPOSITION
    assert meta["sim_config"]["pool"]["composition"] == composition


@pytest.mark.parametrize("config_file", ["stage1_train_config.json", "train_config.json"])
def test_recorded_argv_parses_to_the_stored_config(config_file):
    """reconfig_target's recorded command lines (``argv``) give their stored configs exactly."""
    meta = current_meta(json.loads((CHECKPOINTS / "reconfig_target" / config_file).read_text()))
    argv = meta["argv"][1:] if meta["argv"][0] == "cpgym" else meta["argv"]
    parsed = _parsed_config(argv)
    default = _parsed_config(["train", meta["kind"], "--out", "unused"])
    stored = meta["train_config"]
    assert set(stored) <= set(parsed)
    # fields added after the run: the recorded command must leave them at their default
    assert {k: parsed[k] for k in set(parsed) - set(stored)} == {k: default[k] for k in set(parsed) - set(stored)}
    assert {k: parsed[k] for k in stored} == stored


def test_every_readme_training_command_is_checked():
    """A checkpoint README with a `cpgym train routing|reconfig` command has its cases above (one per command)."""
    found = {}
    for readme in sorted(CHECKPOINTS.glob("*/README.md")):
        cmds = [c for c in readme_train_commands(readme) if c[1] in ("routing", "reconfig")]
        if cmds:
            found[readme.parent.name] = len(cmds)
    covered = {}
    for name, *_ in CASES:
        covered[name] = covered.get(name, 0) + 1
    assert found == covered


def test_readme_command_reader():
    import textwrap
    from tempfile import TemporaryDirectory

    text = textwrap.dedent("""\
        Prose `cpgym train reconfig --not-a-command` is skipped.

            T=../traces/x.jsonl
            OMP_NUM_THREADS=1 python -m policies.reconfig.train --out A \\
                --workload-seeds 0,1,2,...,5 --target-rps 2   # comment
            cpgym train routing --trace $T --out B
        """)
    with TemporaryDirectory() as d:
        readme = Path(d) / "README.md"
        readme.write_text(text)
        assert readme_train_commands(readme) == [
            ["train", "reconfig", "--out", "A", "--workload-seeds", "0,1,2,3,4,5", "--target-rps", "2"],
            ["train", "routing", "--trace", "../traces/x.jsonl", "--out", "B"]]
