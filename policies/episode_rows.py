"""Re-reading the per-episode rows of an evaluation from its CSV (``cpgym evaluate --from-csv``):
routing, reconfiguration and protocol rows, checked column by column."""

from __future__ import annotations

import math

from policies.routing.evaluate import METRICS
from policies.routing.protocol import cell_name

#: Columns of the per-episode rows that :func:`aggregate` (routing),
#: ``policies.reconfig.evaluate.aggregate_reconfig`` (reconfig) and ``policies.routing.protocol.cell_table``
#: (protocol: the per-window rows of ``--loads`` / ``--protocol``, one cell per workload and load) read.
ROW_COLUMNS = {"routing": ("policy", "seed", "window", *METRICS),
               "reconfig": ("policy", "seed", "mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted",
                            "num_operations", "num_committed_operations", "num_unfinished"),
               "protocol": ("policy", "workload", "load_fraction", "rate_rps", "window", "mean_ttft_s", "p90_ttft_s",
                            "slo_attainment_token_weighted")}
#: The episode key of each kind's rows (one row per key).
_EPISODE_KEY = {"routing": ["policy", "seed", "window"], "reconfig": ["policy", "seed"],
                "protocol": ["policy", "workload", "load_fraction", "rate_rps", "window"]}


def is_protocol_csv(columns) -> bool:
    """Whether CSV ``columns`` are those of the protocol evaluation's rows (``cpgym evaluate --loads``
    / ``--protocol --out``: a cell's ``load_fraction`` and ``rate_rps``, no ``seed``). One of the two
    is enough, so that such a CSV lacking a column (``window`` too) is named as a protocol CSV
    lacking it, not as a routing CSV lacking ``seed``."""
    return "seed" not in columns and bool({"load_fraction", "rate_rps"} & set(columns))


def _csv_kind(path: str, columns, kind: str) -> str:
    """The kind of rows of a per-episode CSV (:func:`read_episode_rows`): ``kind``, or with ``auto``
    the one its columns tell; a protocol CSV read as ``routing`` is read as ``protocol`` (a
    routing evaluation too).

    Raises:
        ValueError: a protocol CSV read as ``reconfig``.
    """
    if is_protocol_csv(columns):
        if kind == "reconfig":
            raise ValueError(f"{path}: the per-window rows of a protocol evaluation (`cpgym evaluate --loads/--protocol "
                             "--out`: columns load_fraction, rate_rps, no seed); expected the per-episode rows of a "
                             "reconfig evaluation (`cpgym evaluate --kind reconfig --out`); drop --kind reconfig")
        return "protocol"
    if kind == "auto":
        return "reconfig" if "num_operations" in columns else "routing"
    return kind


def read_episode_rows(path: str, kind: str = "auto") -> tuple[str, list[dict]]:
    """``(kind, rows)`` of a per-episode CSV written by ``cpgym evaluate --out``; ``kind`` ``auto``
    is told from the columns (``num_operations``: reconfig; ``load_fraction`` and ``rate_rps``
    without ``seed``: ``protocol``, the per-window rows of ``--loads`` / ``--protocol``, also when
    ``kind`` is ``routing``; else routing). A protocol row's empty ``load_fraction`` (an absolute
    rate) is ``None``, as the run's rows have it.

    An empty metric cell is a metric the episode did not record (``--out`` writes NaN so); a
    written ``nan`` or ``inf`` is not a value cpgym writes.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: naming the file, when it is empty, not CSV, has no rows or lacks a column of
            :data:`ROW_COLUMNS`; naming the row and field, on a value of those columns outside its
            range (:func:`_row_value_range`: a seed or window that is not an integer >= 0, a time
            that is not a finite number >= 0, a share outside [0, 1], a count that is not an
            integer >= 0) or a second row of one episode; on an empty ``policy``, a routing row in a
            reconfig CSV or a ``best-fixed-in-hindsight`` row without its ``composition``
            (:func:`_check_row_labels`).
    """
    import pandas as pd

    try:
        df = pd.read_csv(path, keep_default_na=False, na_values=[""])  # "nan", "NA" stay text: not numbers
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a per-episode CSV ({' '.join(str(exc).split())}); "
                         f"expected the file written by `cpgym evaluate --out`") from None
    _check_row_lengths(path)
    kind = _csv_kind(path, df.columns, kind)
    missing = [c for c in ROW_COLUMNS[kind] if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; expected the per-episode rows of a {kind} "
                         f"evaluation written by `cpgym evaluate --out`")
    if df.empty:
        raise ValueError(f"{path}: no rows; expected the per-episode rows written by `cpgym evaluate --out`")
    key = _EPISODE_KEY[kind]
    _check_row_labels(path, df, kind)
    for col in ROW_COLUMNS[kind][1:]:
        if col == "workload":  # a label (text: _check_row_labels)
            continue
        num = pd.to_numeric(df[col], errors="coerce")
        integer = col in ("seed", "window")
        low, high, integral, what = _row_value_range(col, integer)
        finite = num.abs() < math.inf
        in_range = finite & (num >= low) & (num <= high) & ((num % 1 == 0) if integral else True)
        required = integer or col == "rate_rps"  # else an empty cell: a metric not recorded, an absolute rate
        bad = ~in_range if required else ~in_range & df[col].notna()
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise ValueError(f"{path}, row {i + 1}, field {col!r}: got {df[col].tolist()[i]!r}; expected {what}")
        df[col] = num.astype(int) if integer else num
    dup = df.duplicated(key).to_numpy()
    if dup.any():
        i = int(dup.argmax())
        episode = ", ".join(f"{k} {df[k].iloc[i]!r}" if k in ("policy", "workload") else
                            f"{k} {int(df[k].iloc[i])}" if k in ("seed", "window") else
                            f"{k} {df[k].iloc[i]:g}" if df[k].notna().iloc[i] else f"{k} empty (an absolute rate)"
                            for k in key)
        raise ValueError(f"{path}, row {i + 1}: a second row of the episode ({episode}); expected one row per "
                         "episode (paired deltas and CIs would count it twice)")
    rows = df.to_dict("records")
    if kind == "protocol":  # an absolute rate's cell: None (NaN keys would make each row its own cell)
        for r in rows:
            r["load_fraction"] = None if r["load_fraction"] != r["load_fraction"] else r["load_fraction"]
    return kind, rows


def _check_row_lengths(path: str) -> None:
    """Every row of a per-episode CSV has as many fields as its header (``--out`` writes an empty
    cell for a metric not recorded): pandas fills a short row's last columns with NaN, read as
    metrics not recorded, and reads a row one field longer than the header as an index column,
    shifting its values one column left.

    Raises:
        ValueError: naming the file and the row (numbered as :func:`read_episode_rows` numbers them).
    """
    import csv

    with open(path, newline="", encoding="utf-8-sig") as f:
        lines = (fields for fields in csv.reader(f) if fields)  # blank lines: skipped, as pandas does
        try:
            header = next(lines, [])
            for i, fields in enumerate(lines, 1):
                if len(fields) != len(header):
                    raise ValueError(f"{path}, row {i}: {len(fields)} fields, the header has {len(header)}; expected one "
                                     "field per column (an empty one for a metric not recorded), as `cpgym evaluate "
                                     "--out` writes them")
        except csv.Error as exc:
            raise ValueError(f"{path}: not a per-episode CSV ({exc}); expected the file written by `cpgym evaluate "
                             "--out`") from None


def uneven_episodes(rows: list[dict], kind: str) -> str | None:
    """A one-line description of the policies of ``rows`` (from :func:`read_episode_rows`) that lack
    episodes other policies have, or ``None`` when every policy has the same episodes (a live
    ``cpgym evaluate`` run always has; a concatenated or hand-edited CSV may not).

    With uneven episodes a policy's mean columns average its own episodes while its paired
    deltas use only those it shares with the reference, so its row is not comparable column by
    column with the others.

    Args:
        rows: per-episode rows (``policy``, ``seed`` and, for ``kind="routing"``, ``window``; protocol
            rows: ``workload``, ``load_fraction``, ``rate_rps``, ``window``).
        kind: ``"routing"`` (episodes are (seed, window)), ``"reconfig"`` (episodes are seeds) or
            ``"protocol"`` (episodes are (cell, window)).
    """
    if kind == "protocol":  # (cell, window), the cell as policies.routing.protocol.Scenario.key names it

        def key(r):
            return cell_name(r["workload"], r["load_fraction"], r["rate_rps"]), int(r["window"])
    else:
        key = (lambda r: (int(r["seed"]), int(r["window"]))) if kind == "routing" else (lambda r: int(r["seed"]))
    per_policy: dict[str, set] = {}
    for r in rows:
        per_policy.setdefault(r["policy"], set()).add(key(r))
    union = set().union(*per_policy.values()) if per_policy else set()
    short = {p: sorted(union - eps) for p, eps in per_policy.items() if eps != union}
    if not short:
        return None
    what = {"routing": "(seed, window) episodes", "protocol": "windows"}.get(kind, "seeds")

    def listed(missing: list) -> str:
        text = (lambda k: f"{k[0]} window {k[1]}") if kind == "protocol" else str
        return ", ".join(map(text, missing[:5])) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")

    return ("policies were evaluated on different episodes: " + "; ".join(
        f"{p} lacks {what} {listed(m)}" for p, m in short.items())
        + " (each mean column averages that policy's own episodes; a paired delta uses only the episodes it "
          "shares with the reference)")


def _check_row_labels(path: str, df, kind: str) -> None:
    """The text columns of :func:`read_episode_rows`' rows: every ``policy`` (and a protocol row's
    ``workload``) a non-empty label (read as text: a number-like label stays a label); in a
    reconfig CSV, no routing row (a ``window`` set: the rows of two kinds of evaluation,
    concatenated, were aggregated as one), and a
    ``composition`` on every ``best-fixed-in-hindsight`` row (the table lists the winners).

    Raises:
        ValueError: naming the file, the row and the field.
    """
    for col in ("policy", "workload") if kind == "protocol" else ("policy",):
        empty = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if empty.any():
            raise ValueError(f"{path}, row {int(empty.to_numpy().argmax()) + 1}, field {col!r}: empty; expected the {col} "
                             "label of the episode")
        df[col] = df[col].astype(str)
    if kind != "reconfig":
        return
    if "window" in df.columns and df["window"].notna().any():
        i = int(df["window"].notna().to_numpy().argmax())
        window = df["window"].tolist()[i]
        raise ValueError(f"{path}, row {i + 1}: a routing evaluation's row (field 'window' {window!r}) among "
                         "a reconfiguration evaluation's rows; expected the rows of one kind of evaluation")
    best = (df["policy"] == "best-fixed-in-hindsight").to_numpy()
    comp = df["composition"] if "composition" in df.columns else None
    missing = best & (comp.isna().to_numpy() if comp is not None else True)
    if missing.any():
        raise ValueError(f"{path}, row {int(missing.argmax()) + 1}, field 'composition': "
                         f"{'missing column' if comp is None else 'empty'}; expected the fixed composition that won "
                         "the seed on a best-fixed-in-hindsight row (as `cpgym evaluate --out` writes it)")


def _row_value_range(column: str, key: bool) -> tuple[float, float, bool, str]:
    """``(low, high, integer?, description)`` of a per-episode CSV column: ``seed`` / ``window``
    (``key``) and the counts ``num_*`` integers >= 0, shares (``slo_attainment_*``,
    ``prefix_hit_rate``) in [0, 1], times (``*_s``) finite numbers >= 0."""
    if key:
        return 0, math.inf, True, "an integer >= 0"
    if column == "load_fraction":
        return math.nextafter(0.0, 1.0), 2, False, "a fraction of capacity in (0, 2] (or an empty cell: an absolute rate)"
    if column == "rate_rps":
        return math.nextafter(0.0, 1.0), math.inf, False, "a rate > 0 [requests/s]"
    if column.startswith("num_"):
        return 0, math.inf, True, "a count (an integer >= 0)"
    if column.startswith("slo_attainment") or column == "prefix_hit_rate":
        return 0, 1, False, "a share in [0, 1] (or an empty cell: not recorded)"
    return 0, math.inf, False, "a finite number >= 0 (or an empty cell: not recorded)"


def choose_reference(rows: list[dict], reference: str | None) -> str | None:
    """The policy of the paired delta columns: ``reference``, else ``vertumnus-router`` or
    ``vertumnus`` if evaluated,
    else the second policy (the first compared one).

    Raises:
        ValueError: when ``reference`` is not among the evaluated policies.
    """
    labels = list(dict.fromkeys(r["policy"] for r in rows))
    vert = [v for v in ("vertumnus-router", "vertumnus") if v in labels]
    ref = reference or (vert[0] if vert else (labels[1] if len(labels) > 1 else None))
    if ref is not None and ref not in labels:
        raise ValueError(f"--reference {ref!r} is not among the evaluated policies {labels}")
    return ref
