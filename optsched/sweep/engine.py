"""Running a sweep: skip finished runs, execute the rest on an executor, write
each run's folder as its result arrives, gather one tidy table.

Layout of ``DIR``::

    sweep.json          the exact configuration (re-run with ``optsched sweep --file DIR/sweep.json``)
    results.parquet|csv one row per run: configuration columns + status/error + summary metrics
    jobs.parquet        every run's per-job table, with run_id/policy/load/seed/cluster columns
    rounds.parquet      every run's per-round table, same key columns
    auto_choices.csv    the decisions of ``auto`` runs
    runs/<id>/          jobs/rounds (CSV + Parquet), summary.json, run.json, row.json,
                        choices.csv (auto), error.json (a failed run), done (written last)

A run whose ``done`` marker exists is not run again; a failed run has no
marker, so the next invocation retries it (``retry_failed=False`` keeps the
recorded failure).
"""

from __future__ import annotations

from optsched.model import json_default

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from optsched.sweep.spec import SweepSpec, trace_identity

KEY_COLUMNS = ("run_id", "trace", "cluster", "policy", "load", "seed")


@dataclass
class SweepResult:
    table: object  # pandas DataFrame, one row per run, sorted by run_id
    total: int
    executed: int
    reused: int
    failed: int
    wall_seconds: float
    out: Path


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


_plain = json_default  # one converter for every executor (optsched.model)


def _row_json(row: dict) -> str:
    """row.json: strict JSON, a missing metric (NaN in the table) as null."""
    clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
    return json.dumps(clean, default=_plain) + "\n"


def _read_row(path: Path) -> dict:
    """A row.json as the table holds it: null back to NaN (older sweeps wrote NaN itself)."""
    return {k: math.nan if v is None else v for k, v in json.loads(path.read_text()).items()}


def row_of(payload: dict) -> dict:
    run = payload["run"]
    row = {
        "run_id": run["run_id"],
        "trace": run["trace"],
        "trace_options": json.dumps(run["trace_options"], sort_keys=True),
        "cluster": run["cluster"] or "default",
        "policy": run["policy"],
        "load": float(run["load"]),
        "seed": int(run["seed"]),
        "options": json.dumps(run["options"], sort_keys=True, default=str),
        "status": payload["status"],
        "error": payload.get("error", ""),
        "run_seconds": float(payload.get("run_seconds", math.nan)),
    }
    for k, v in (payload.get("summary") or {}).items():
        if k in ("policy",):
            continue
        if isinstance(v, dict):
            for kk, vv in v.items():
                if isinstance(vv, (int, float)) and not isinstance(vv, bool):
                    row[f"{k}_{kk}"] = float(vv)
        elif isinstance(v, bool):
            row[k] = v
        elif isinstance(v, (int, float)):
            row[k] = float(v) if isinstance(v, float) else int(v)
        elif v is None:
            row[k] = math.nan
        elif isinstance(v, str):
            row[k] = v
        elif hasattr(v, "item"):
            row[k] = v.item()
    return row


def write_run(runs_dir: Path, payload: dict) -> dict:
    """The run's folder; ``done`` last (atomic), so a crash mid-write leaves an unfinished run."""
    run = payload["run"]
    d = runs_dir / run["run_id"]
    d.mkdir(parents=True, exist_ok=True)
    (d / "done").unlink(missing_ok=True)
    row = row_of(payload)
    _atomic_write(d / "run.json", json.dumps(run, indent=2, sort_keys=True, default=str) + "\n")
    if payload["status"] == "ok":
        (d / "error.json").unlink(missing_ok=True)
        from optsched.sim import SimResult

        SimResult(payload["jobs"], payload["rounds"], payload["summary"], payload["config"]).write(d)
        if payload.get("choices") is not None:
            payload["choices"].to_csv(d / "choices.csv", index=False)
        _atomic_write(d / "row.json", _row_json(row))
        _atomic_write(d / "done", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n")
    else:
        _atomic_write(d / "error.json", json.dumps({"error": payload["error"], "traceback": payload.get("traceback", "")},
                                                   indent=2) + "\n")
        _atomic_write(d / "row.json", _row_json(row))
    return row


def _finished(runs_dir: Path, run: dict, retry_failed: bool) -> bool:
    d = runs_dir / run["run_id"]
    if (d / "done").exists():
        return True
    return not retry_failed and (d / "error.json").exists()


def run_sweep(spec: SweepSpec, out, progress=None, retry_failed: bool = True, validate: bool = True) -> SweepResult:
    """Run ``spec`` into ``out``. ``progress(done, total, row)`` after every run."""
    from optsched.sweep import spec as spec_mod
    from optsched.sweep.executors import executor_for

    if validate:
        spec_mod.validate(spec)
    out = Path(out)
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    runs = spec.runs()
    from optsched import __version__

    # The trace as the runs name it (an absolute path): `--file DIR/sweep.json` works from any folder.
    recorded = {**spec.to_dict(), "trace": trace_identity(spec.trace)}
    _atomic_write(out / "sweep.json", json.dumps({"spec": recorded, "optsched_version": __version__, "runs": runs},
                                                 indent=2, default=str) + "\n")
    todo = [r for r in runs if not _finished(runs_dir, r, retry_failed)]
    t0 = time.perf_counter()
    done = len(runs) - len(todo)
    failed = 0
    if progress:
        progress(done, len(runs), None)
    if todo:
        for payload in executor_for(spec)(todo):
            row = write_run(runs_dir, payload)
            failed += payload["status"] != "ok"
            done += 1
            if progress:
                progress(done, len(runs), row)
    wall = time.perf_counter() - t0
    table = gather(out, runs)
    return SweepResult(table, len(runs), len(todo), len(runs) - len(todo), failed, wall, out)


def gather(out, runs: list[dict] | None = None):
    """The tidy tables from the run folders (``runs``: which; default every run of sweep.json)."""
    import pandas as pd

    out = Path(out)
    if runs is None:
        runs = json.loads((out / "sweep.json").read_text())["runs"]
    rows, jobs, rounds, choices = [], [], [], []
    for run in runs:
        d = out / "runs" / run["run_id"]
        if not (d / "row.json").exists():
            continue
        row = _read_row(d / "row.json")
        rows.append(row)
        if not (d / "done").exists():
            continue
        key = {k: row[k] for k in KEY_COLUMNS}
        for name, acc in (("jobs", jobs), ("rounds", rounds)):
            f = d / f"{name}.parquet"
            if f.exists():
                acc.append(pd.read_parquet(f).assign(**key))
        if (d / "choices.csv").exists():
            acc = pd.read_csv(d / "choices.csv")
            choices.append(acc.assign(**key))
    table = pd.DataFrame(rows)
    if len(table):
        first = [c for c in ("run_id", "trace", "trace_options", "cluster", "policy", "load", "seed", "options",
                             "status", "error") if c in table]
        table = table[first + [c for c in table.columns if c not in first]]
        table = table.sort_values("run_id", kind="stable").reset_index(drop=True)
    table.to_parquet(out / "results.parquet", index=False)
    table.to_csv(out / "results.csv", index=False)
    for name, acc in (("jobs", jobs), ("rounds", rounds)):
        if acc:
            frame = pd.concat(acc, ignore_index=True)
            frame = frame[list(KEY_COLUMNS) + [c for c in frame.columns if c not in KEY_COLUMNS]]
            frame.to_parquet(out / f"{name}.parquet", index=False)
    if choices:
        pd.concat(choices, ignore_index=True).to_csv(out / "auto_choices.csv", index=False)
    return table
