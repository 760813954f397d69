"""The ``cpgym`` command line.

Each sub-command is two modules named by one stem in :data:`COMMANDS`: its flags,
``experiments/flags/STEM.py`` with ``add_arguments(parser)`` (light: it imports no torch,
gymnasium, Stable-Baselines3, training code, pandas or matplotlib), and its run,
``experiments/commands/STEM.py`` with ``run(args) -> int``, imported only when that command runs.
Building the parser (:func:`build_parser`) imports flag modules only; ``cpgym COMMAND`` itself
(:func:`main`) declares the flags of that one command (:class:`CommandParser`), so that its start-up
does not pay for the others' declarations.

Adding a command is one entry in :data:`COMMANDS` plus its two modules; a group of commands
(``cpgym NAME SUB ...``) is one entry ``NAME: (group help, {SUB: (STEM, help), ...})``.

Tooling commands are grouped: ``cpgym bench sim|env`` and ``cpgym kernels check|profile|calibrate``.
The old spellings ``cpgym bench`` (no ``sim``/``env``), ``bench-env``, ``profile`` and ``calibrate``
stay as aliases for one release (:data:`ALIASES`).

Errors: an input error (``ValueError`` raised by cpgym's own validation, ``OSError`` for
missing / unreadable files, ``EOFError`` for truncated archives) is one line on stderr and exit
status 2. Any other exception — including a ``ValueError`` raised inside a library, which means
cpgym passed it something it did not validate — is a bug and propagates with its traceback
(exit status 1). ``cpgym --traceback COMMAND ...`` re-raises every error, input errors included.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from pathlib import Path

from envs.sim.options import error_text

# name -> (stem, one-line help) for a command, or name -> (group help, {sub-name: (stem, help)}) for
# a group of commands; the stem names the flags module experiments/flags/STEM.py (add_arguments)
# and the run module experiments/commands/STEM.py (run). Plain registry; add a line to add a command.
COMMANDS: dict[str, tuple[str, str] | tuple[str, dict[str, tuple[str, str]]]] = {
    "simulate": ("simulate",
                 "simulate a trace or workload under routing policies and print the comparison"),
    "train": ("train", "train a learned routing or reconfiguration policy (MaskablePPO)"),
    "evaluate": ("evaluate",
                 "a policy against others on one benchmark task (the benchmark protocol: paired 95% CIs vs the "
                 "task's reference)"),
    "tune": ("tune", "tune a heuristic's parameters on the training windows of a scenario (JSON)"),
    "dynamic": ("dynamic",
                "paper §9 dynamic phases: Vertumnus + split/merge controller vs every fixed composition "
                "(per-phase TTFT, reconfiguration ops, plot)"),
    "capacity": ("capacity",
                 "sustainable rate per policy (highest rate whose backlog drains and SLOs hold), by bisection, cached"),
    "reproduce": ("reproduce",
                  "the paper's end-to-end evaluation: paper figure beside cpgym's with 95% CIs, "
                  "at loads relative to capacity"),
    "compare": ("compare",
                "compare a policy suite at several request rates (paper-style table, % vs strongest baseline, plot)"),
    "sweep": ("sweep", "run an experiment spec's cells (resumable; local process pool or Ray)"),
    "report": ("report",
               "plots and a Markdown summary (95% CIs over seeds) of a sweep, several sweeps or a folder of simulate runs"),
    "cache-ablation": ("cache_ablation",
                       "Vertumnus with local caches only vs with the global prefix-cache manager on tool-agent "
                       "at increasing rates"),
    "kv-tiers": ("kv_tiers",
                 "multi-tier KV study: HBM / + host DRAM / + store per policy at a fraction of capacity, "
                 "LRU vs queue-aware eviction"),
    "cache-curve": ("cache_curve",
                    "replay a trace through one LRU prefix cache of N blocks: token-weighted hit rate per N (cache sizing)"),
    "bench": ("benchmarks: `bench sim` (simulator speed), `bench env` (Gymnasium env speed)", {
        "sim": ("bench", "measure simulator speed (requests/s, simulated/wall time, peak memory)"),
        "env": ("bench_env", "measure Gymnasium env steps/s and per-decision policy latency"),
    }),
    "kernels": ("reference CP attention kernels: `kernels check|profile|calibrate`", {
        "check": ("kernels",
                  "run the CP attention correctness suite against float64 references (CPU, gloo)"),
        "profile": ("profile",
                    "time CP prefill over an (R, P, C) grid, fit the cost model, write a calibration file"),
        "calibrate": ("calibrate",
                      "roofline calibration from a model config and a GPU datasheet; writes a calibration file"),
    }),
    "benchmark": ("the cpgym benchmark (named tasks, sealed splits, one protocol, a validated leaderboard): "
                  "`benchmark list|run|capacity|tune|leaderboard|validate`", {
        "list": ("benchmark_list", "the benchmark's tasks with their capacity, rate and splits"),
        "run": ("benchmark_run",
                "policies on benchmark tasks: one row per (task, policy) vs the task's reference, paired 95% CI"),
        "capacity": ("benchmark_capacity",
                     "re-measure tasks' capacity on their training split and store it (benchmark/capacity.json)"),
        "leaderboard": ("benchmark_leaderboard",
                        "regenerate results/benchmark/LEADERBOARD.md from the entries and the test-split ledger"),
        "validate": ("benchmark_validate",
                     "re-run a leaderboard entry and check it number by number (exit 1 on a mismatch)"),
        "tune": ("benchmark_tune", "tune a heuristic's parameters per task (Optuna TPE on the training split, chosen on "
                                   "validation; benchmark/tuned/), or a reconfiguration task's best fixed composition"),
    }),
    "faults": ("faults",
               "every §9 policy and the learned router under a GPU failure, a straggler and a node failure "
               "at 0.8 x capacity (table, TTFT-over-time plots)"),
}

# Deprecated spellings kept for one release: old name -> (group, sub-command). ``cpgym bench``
# without ``sim``/``env`` means ``cpgym bench sim`` (see :func:`normalize_argv`).
ALIASES: dict[str, tuple[str, str]] = {
    "bench-env": ("bench", "env"),
    "profile": ("kernels", "profile"),
    "calibrate": ("kernels", "calibrate"),
}
_BARE_GROUP_DEFAULT = {"bench": "sim"}

# Deprecated flag spellings kept for one release (see :func:`normalize_argv`): old -> new, in
# every command; :data:`COMMAND_FLAG_ALIASES` overrides it for one command.
FLAG_ALIASES: dict[str, str] = {
    "--window-s": "--arrival-window-s",  # the [START, END) arrival window cut out of the workload
    "--controller-window-s": "--decision-window-s",  # the controller's observation / decision window
}
COMMAND_FLAG_ALIASES: dict[str, dict[str, str]] = {
    "reproduce": {"--window-s": "--arrival-window-length-s"},  # one number: the window [0, LENGTH)
    "evaluate": {"--max-windows": "--max-episodes"},  # the benchmark protocol's episodes
}

# cpgym's own top-level packages: a ValueError raised from code in them is deliberate input validation.
_OWN_PACKAGES = ("envs", "baselines", "benchmark", "policies", "kernels_ref", "experiments")


#: Packages of the commands' flag declarations and of their runs (module ``PACKAGE.STEM``).
FLAGS_PACKAGE = "experiments.flags"
RUN_PACKAGE = "experiments.commands"


class CommandParser(argparse.ArgumentParser):
    """The parser of one command whose flags are declared on first use: by :meth:`declare`, called
    when it parses (``cpgym COMMAND ...``, ``--help`` included) or formats its help. The top-level
    parser of :func:`main` builds every command this way and so imports only the flags module of
    the command given; :func:`build_parser` declares every command at once (the CLI reference)."""

    _flags_module: str | None = None
    _command: str | None = None  # the command as the user names it in messages: "bench sim", "train routing"

    def declare(self) -> CommandParser:
        """Imports the command's flags module and adds its flags (once); returns ``self``. A
        command's own sub-commands (``train routing|reconfig|arms``) get ``_command`` defaults
        naming them (``cpgym train routing: error: ...``)."""
        module, self._flags_module = self._flags_module, None
        if module is not None:
            importlib.import_module(module).add_arguments(self)
            _name_sub_commands(self, self._command)
            _no_abbreviations(self)
        return self

    def error(self, message: str):
        """argparse's error for a bad value of one argument (a type or choice error, a missing or
        extra value, an invalid list) as one line ``PROG: error: FLAG: expected ..., got ...``,
        exit status 2 (:func:`value_error_line`); any other error (an unknown flag, a missing
        required one) keeps argparse's usage and message."""
        line = value_error_line(message, self)
        if line is None:
            super().error(message)
        self.exit(2, f"{self.prog}: error: {line}\n")

    def parse_known_args(self, args=None, namespace=None):
        self.declare()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self.declare()
        return super().format_usage()

    def format_help(self) -> str:
        self.declare()
        return super().format_help()


def _name_sub_commands(parser: argparse.ArgumentParser, command: str | None) -> None:
    """Sets the ``_command`` default of each sub-parser under ``parser`` (a command's own
    sub-commands, any depth) to ``command`` and its name, the name :func:`main`'s messages give
    (``cpgym train routing: error: ...``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command is not None:
            for name, child in action.choices.items():
                child.set_defaults(_command=f"{command} {name}")
                if isinstance(child, CommandParser):
                    child._command = f"{command} {name}"
                _name_sub_commands(child, f"{command} {name}")


#: argparse's messages for a bad value of one argument (``argument FLAG: DETAIL``; Python 3.11-3.13).
_ARGUMENT_ERROR = re.compile(r"argument (?P<flag>[^:]+): (?P<detail>.*)", re.S)
_TYPE_ERROR = re.compile(r"invalid (?P<type>\w+) value: (?P<value>.*)", re.S)
_CHOICE_ERROR = re.compile(r"invalid choice: (?P<value>.*?) \(choose from (?P<choices>.*)\)", re.S)
_NARGS_ERROR = re.compile(r"expected (?P<n>one|at least one|at most one|\d+) arguments?")
_EXPLICIT_ERROR = re.compile(r"ignored explicit argument (?P<value>.*)", re.S)
_TYPE_NAMES = {"int": "an integer", "float": "a number"}


def value_error_line(message: str, parser: argparse.ArgumentParser | None = None) -> str | None:
    """The one line ``FLAG: expected ..., got ...`` for argparse's error ``message`` about a bad
    value of one argument: a value of the wrong type (``--target-rps abc``), a choice not offered
    (``--format xml``, with a close match suggested), a flag without its value(s), a value given
    to a flag that takes none, or an argparse ``type`` that rejected the text (a comma-separated
    list: ``FLAG: must be ...``). ``None`` for the other errors (unknown or missing flags,
    mutually exclusive ones): those keep argparse's usage. ``parser`` names the values a flag
    with several takes (its metavar)."""
    import difflib

    m = _ARGUMENT_ERROR.fullmatch(message)
    if m is None or m["detail"].startswith("not allowed with argument"):
        return None
    flag, detail = m["flag"], m["detail"]
    if t := _TYPE_ERROR.fullmatch(detail):
        return f"{flag}: expected {_TYPE_NAMES.get(t['type'], 'a ' + t['type'] + ' value')}, got {t['value']}"
    if c := _CHOICE_ERROR.fullmatch(detail):
        choices = [x.strip().strip("'") for x in c["choices"].split(",")]
        close = difflib.get_close_matches(c["value"].strip("'"), choices, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{flag}: expected one of {', '.join(choices)}, got {c['value']}{hint}"
    if n := _NARGS_ERROR.fullmatch(detail):
        if n["n"] in ("one", "at least one"):
            return f"{flag}: expected a value, got none"
        if n["n"] == "at most one":
            return f"{flag}: expected at most one value, got more"
        action = parser._option_string_actions.get(flag.split("/")[0]) if parser is not None else None
        names = f" ({' '.join(action.metavar)})" if action is not None and isinstance(action.metavar, tuple) else ""
        return f"{flag}: expected {n['n']} values{names}, got fewer"
    if e := _EXPLICIT_ERROR.fullmatch(detail):
        return f"{flag}: expected no value (a switch), got {e['value']}"
    if detail.startswith(("expected", "must ")):  # an argparse `type` that names what it expects
        return f"{flag}: {detail}"
    return None


def _add_leaf(sub, name: str, stem: str, help_text: str, command: str, declare: bool) -> None:
    # argparse %-formats `help` strings but prints `description` as written
    p = sub.add_parser(name, help=help_text.replace("%", "%%"), description=help_text)
    p.set_defaults(_module=f"{RUN_PACKAGE}.{stem}", _command=command)
    p._flags_module, p._command = f"{FLAGS_PACKAGE}.{stem}", command
    if declare:
        p.declare()


def build_parser(declare: bool = True) -> argparse.ArgumentParser:
    """The full ``cpgym`` parser (every command, group and deprecated alias). ``declare=False``
    leaves each command's flags to be declared when that command parses (:class:`CommandParser`;
    what :func:`main` uses): the same parser, less start-up."""
    parser = CommandParser(
        prog="cpgym", description="Adaptive context-parallel prefill serving: simulator, baselines, learned policies.",
        epilog="Deprecated aliases (kept for one release): `bench` without sim|env = `bench sim`, "
               + ", ".join(f"`{old}` = `{' '.join(new)}`" for old, new in ALIASES.items()) + ".")
    parser.add_argument("--traceback", action="store_true",
                        help="re-raise every error with its full traceback (debugging); "
                             "by default input errors are one line on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    sub.required = True
    for name, (first, second) in COMMANDS.items():
        if isinstance(second, str):
            _add_leaf(sub, name, first, second, name, declare)
            continue
        extra = f" (`cpgym {name} [options]` alone is the deprecated alias of `{name} {_BARE_GROUP_DEFAULT[name]}`)" \
            if name in _BARE_GROUP_DEFAULT else ""
        group = sub.add_parser(name, help=first + extra, description=first + extra)
        group_sub = group.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", parser_class=CommandParser)
        group_sub.required = True
        for sub_name, (stem, help_text) in second.items():
            _add_leaf(group_sub, sub_name, stem, help_text, f"{name} {sub_name}", declare)
    for old, (group_name, sub_name) in ALIASES.items():
        stem, help_text = COMMANDS[group_name][1][sub_name]
        _add_leaf(sub, old, stem, f"deprecated alias of `cpgym {group_name} {sub_name}` (removed in the next release): "
                  + help_text, f"{group_name} {sub_name}", declare)
    _no_abbreviations(parser)
    return parser


def _no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """Turns off argparse's prefix matching in ``parser`` and every sub-parser: a flag a command
    does not take (``compare --seed``) is an error, never silently read as a longer one (``--seeds``)."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                _no_abbreviations(child)


def _command_token(argv: list[str]) -> str | None:
    """The command name of ``argv``: its first non-option argument, or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def deprecated_flags(argv: list[str]) -> list[tuple[str, str]]:
    """``[(old, new), ...]``: the deprecated flag spellings ``argv`` uses (:data:`FLAG_ALIASES`,
    :data:`COMMAND_FLAG_ALIASES`), in order, each once; arguments after ``--`` are not flags."""
    aliases = {**FLAG_ALIASES, **COMMAND_FLAG_ALIASES.get(_command_token(argv) or "", {})}
    found: list[tuple[str, str]] = []
    for a in argv:
        if a == "--":
            break
        old = a.split("=", 1)[0]
        if old in aliases and (old, aliases[old]) not in found:
            found.append((old, aliases[old]))
    return found


def _rename_flags(argv: list[str]) -> list[str]:
    """``argv`` with each deprecated flag spelling (:func:`deprecated_flags`) replaced by its new one."""
    renames = dict(deprecated_flags(argv))
    out, flags = [], True
    for a in argv:
        flags = flags and a != "--"
        old, eq, value = a.partition("=")
        out.append(renames[old] + eq + value if flags and old in renames else a)
    return out


def normalize_argv(argv: list[str]) -> list[str]:
    """Rewrites deprecated spellings: the bare group ``bench [options]`` -> ``bench sim [options]``
    and the old flag names (:data:`FLAG_ALIASES`: ``--window-s`` -> ``--arrival-window-s``).

    Only the command token (the first non-option argument) is looked at for the group; ``bench
    --help`` still shows the group's help.
    """
    argv = _rename_flags(list(argv))
    i = next((k for k, a in enumerate(argv) if not a.startswith("-")), None)
    if i is None or argv[i] not in _BARE_GROUP_DEFAULT:
        return argv
    group = COMMANDS[argv[i]][1]
    rest = argv[i + 1:]
    if rest and (rest[0] in group or rest[0] in ("-h", "--help")):
        return argv
    return argv[:i + 1] + [_BARE_GROUP_DEFAULT[argv[i]]] + rest


def deprecation_notice(argv: list[str]) -> str | None:
    """The notice printed on stderr when ``argv`` uses a deprecated spelling (an :data:`ALIASES`
    name, a bare group such as ``bench [options]``, a :data:`FLAG_ALIASES` flag), one line per
    spelling, else None."""
    lines = [f"cpgym: warning: {old} is deprecated; use {new}" for old, new in deprecated_flags(argv)]
    i = next((k for k, a in enumerate(argv) if not a.startswith("-")), None)
    old = argv[i] if i is not None else None
    if old in ALIASES:
        new = " ".join(ALIASES[old])
    elif old in _BARE_GROUP_DEFAULT and normalize_argv(argv) != _rename_flags(list(argv)):
        new = f"{old} {_BARE_GROUP_DEFAULT[old]}"
    else:
        return "\n".join(lines) or None
    lines.insert(0, f"cpgym: warning: `cpgym {old}` is deprecated and will be removed in the next release; "
                    f"use `cpgym {new}`")
    return "\n".join(lines)


def _leaf_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub-)parser of the command ``args`` was parsed for: the top-level parser followed down
    through the chosen sub-command of each level (``cpgym train routing`` -> its own parser)."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or getattr(args, subs[0].dest, None) not in subs[0].choices:
            return parser
        parser = subs[0].choices[getattr(args, subs[0].dest)]


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parses ``argv`` like ``build_parser().parse_args`` but reports an unknown option with the
    usage and name of the sub-command it was given to (``cpgym train routing: error:
    unrecognized arguments: --seed 3``), not the top-level usage."""
    parser = build_parser(declare=False)
    args, extras = parser.parse_known_args(normalize_argv(argv))
    renamed = deprecated_flags(argv)
    if extras:  # named as the user spelled them (a deprecated flag the command lacks was renamed)
        back = {new: old for old, new in renamed}
        _leaf_parser(parser, args).error(f"unrecognized arguments: {' '.join(back.get(e, e) for e in extras)}")
    given = argv[:argv.index("--")] if "--" in argv else argv
    for old, new in renamed:
        if any(a == new or a.startswith(new + "=") for a in given):
            _leaf_parser(parser, args).error(f"{old} (deprecated) and {new} are the same option; give {new} only")
    return args


def _origin_file(exc: BaseException) -> str | None:
    """The source file of the frame that raised ``exc``: the innermost frame of its traceback, or,
    for an exception re-raised from a ``concurrent.futures`` worker process, the innermost frame of
    the worker's traceback (kept as text in ``exc.__cause__.tb``)."""
    remote = getattr(exc.__cause__, "tb", None)
    if isinstance(remote, str):
        files = re.findall(r'File "([^"]+)", line \d+', remote)
        if files:
            return files[-1]
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename


def _raised_by_cpgym(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by code in one of cpgym's own packages (see :func:`_origin_file`)."""
    origin = _origin_file(exc)
    if origin is None:
        return True
    root = Path(__file__).resolve().parent.parent
    try:
        rel = Path(origin).resolve().relative_to(root)
    except ValueError:
        return False
    return rel.parts[0] in _OWN_PACKAGES


def _is_input_error(exc: BaseException) -> bool:
    """Input errors are one line: cpgym's own ``ValueError`` validation, file-system ``OSError``s and
    ``EOFError`` (truncated files). A ``ValueError`` raised inside a library is not."""
    if isinstance(exc, (OSError, EOFError)):
        return True
    return isinstance(exc, ValueError) and _raised_by_cpgym(exc)


def _one_line_warnings(command: str):
    """A ``warnings.showwarning`` replacement printing a warning of cpgym's own categories (e.g.
    :class:`envs.workloads.TraceWarning`) as one line ``cpgym COMMAND: warning: MESSAGE`` on
    stderr; other warnings (a library's) keep Python's format with their source line."""
    import warnings

    default = warnings.showwarning
    shown: set[str] = set()  # a spec read three times (validation, planning, the run) warns once

    def show(message, category, filename, lineno, file=None, line=None):
        if category.__module__.split(".")[0] in _OWN_PACKAGES:
            if str(message) not in shown:
                shown.add(str(message))
                print(f"cpgym {command}: warning: {message}", file=sys.stderr if file is None else file)
        else:
            default(message, category, filename, lineno, file, line)

    return show


def _exit_interrupted(command: str):
    """A SIGINT handler for after the command returned (interpreter shutdown can take a while after
    the output is printed, and a KeyboardInterrupt then cannot be caught): one line, exit status 130."""

    def handler(signum, frame):
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        print(f"cpgym {command}: interrupted", file=sys.stderr, flush=True)
        os._exit(130)

    return handler


def _finish_entry() -> None:
    """Readies the process for the interpreter's normal exit once the command is done: the atexit
    callbacks run (wandb, multiprocessing, logging) while the :func:`_exit_interrupted` handler
    still answers a Ctrl-C with the one line, the streams are flushed, then SIGINT is ignored.
    Python replaces its own signal handlers by the default disposition early in its teardown, so
    a Ctrl-C while it frees the run's objects killed the process silently; an ignored SIGINT stays
    ignored, and the process ends with the command's status. (This used to end with ``os._exit``,
    which also skipped what runs after ``main`` returns: ``python -m cProfile -o F`` never wrote
    ``F``.) Does nothing when other threads are alive: the teardown joins them before the atexit
    callbacks, and a Ctrl-C then gets the handler's line."""
    import atexit
    import signal
    import threading

    if threading.active_count() > 1:
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def main(argv: list[str] | None = None) -> int:
    """Runs the ``cpgym`` command of ``argv`` (default ``sys.argv[1:]``) and returns its exit status.
    As the program's entry (``argv`` None) a Ctrl-C after the command returned still prints the
    one ``interrupted`` line (exit 130) until the atexit callbacks are done, and is ignored in the
    interpreter's teardown (:func:`_finish_entry`); the process exits normally, so a profiler or
    other code after ``main`` (``python -m cProfile -o F``) still runs."""
    if argv is None:
        status = _main(sys.argv[1:], entry=True)
        _finish_entry()
        return status
    return _main(list(argv), entry=False)


def _main(argv: list[str], entry: bool) -> int:
    args = parse_args(argv)
    notice = deprecation_notice(argv)
    if notice:
        print(notice, file=sys.stderr)
    args.argv = ["cpgym", *argv]  # recorded in provenance.json / train_config.json
    module = importlib.import_module(args._module)
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warnings(args._command)
            return int(module.run(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's exit status for SIGINT (128 + 2)
        print(f"cpgym {args._command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (e.g. piped into `head`): not an error
        sys.stdout = open(os.devnull, "w")
        return 0
    except (ValueError, OSError, EOFError) as exc:
        if args.traceback or not _is_input_error(exc):
            raise  # a bug (or --traceback): Python prints the full traceback, exit status 1

        print(f"cpgym {args._command}: error: {error_text(exc)}", file=sys.stderr)
        return 2
    finally:
        if entry:
            import signal

            signal.signal(signal.SIGINT, _exit_interrupted(args._command))


if __name__ == "__main__":
    sys.exit(main())
