"""One run: its canonical configuration in, a payload out (never raises).

The same function runs in the local process pool, in a Ray task and serially,
so every executor produces the same rows. The payload carries the tables back
to the driver, which writes ``DIR/runs/<id>/`` (no shared filesystem needed
with a remote Ray cluster).
"""

from __future__ import annotations

import os
import time
import traceback

# Columns that measure this machine, not the schedule: excluded when two
# executors' tables are compared (everything else is deterministic).
TIMING_COLUMNS = ("wall_seconds", "solver_seconds", "solver_seconds_per_recomputation", "fit_seconds",
                  "run_seconds", "auto_sim_seconds")


def init_worker() -> None:
    """One BLAS thread per worker process (the pool already uses every core)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def execute(run: dict) -> dict:
    init_worker()
    t0 = time.perf_counter()
    try:
        from optsched.sweep.traces import build_cluster, build_trace, throughput_table

        trace = build_trace(run["trace"], run["trace_options"], run["load"], run["seed"])
        cluster = build_cluster(run["cluster"], run.get("prices"), trace)
        opts = dict(run["options"])
        table = throughput_table(run["trace_options"], opts)
        opts.pop("throughputs", None)
        if "window" in opts and opts["window"] is not None:
            opts["window"] = tuple(opts["window"])
        choices = None
        if run["policy"] == "auto":
            from optsched.sweep.auto import simulate_auto

            res, choices = simulate_auto(trace, cluster, throughputs=table, seed=run["seed"], options=opts,
                                         **run["auto"])
        else:
            from optsched.sim import simulate_flags as simulate

            res = simulate(trace, cluster, policy=run["policy"], throughputs=table, seed=run["seed"], **opts)
        return {"run": run, "status": "ok", "error": "", "summary": res.summary, "config": res.config,
                "jobs": res.jobs, "rounds": res.rounds, "choices": choices,
                "run_seconds": time.perf_counter() - t0, "trace_source": trace.source}
    except BaseException as e:  # noqa: BLE001 — a failed run is recorded, the sweep goes on
        if isinstance(e, KeyboardInterrupt):
            raise
        from optsched.extras import missing

        if isinstance(e, ModuleNotFoundError) and missing("the run", e) is not None:  # name the extra
            e = missing("the run", e)
        msg = f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
        return {"run": run, "status": "failed", "error": msg, "traceback": traceback.format_exc(),
                "run_seconds": time.perf_counter() - t0}
