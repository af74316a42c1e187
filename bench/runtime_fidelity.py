"""Sim-vs-real fidelity: the same small trace through ``optsched run`` (real
processes) and ``optsched simulate`` fed the runtime's measurements.

    .venv/bin/python bench/runtime_fidelity.py [--trace examples/workloads/small.csv]
        [--cluster slot=2] [--round-length 2] [--policy max_min_fairness] [--executor local] [--repeats 1]

1. calibrate: run the trace once; each job's steps/s is measured
   (``measured_trace.csv``: duration = steps / measured steps/s);
2. real: run the calibrated trace with ``throughputs="trace"``: the policy
   sees the calibrated speeds (as the simulator will), the jobs run for real;
   its per-job steps/s and mean restart overhead (round start → first step
   after the restore: launch, checkpoint load, the stopped job's exit) are
   measured;
3. sim: ``optsched.simulate`` on the calibrated trace, same cluster, rounds and
   policy, ``restart_overhead`` = step 2's mean, progress at step 2's measured
   per-job steps/s.

Also a prediction: the same simulation with the calibration run's speeds only
(step 1, not step 2's). Prints per-job JCTs and the average-JCT differences (Blox reports 6.1 %
between its simulator and its cluster). Run on a quiet machine: the jobs are
CPU-bound and share its cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(ROOT / "examples" / "workloads" / "small.csv"))
    ap.add_argument("--cluster", default="slot=2")
    ap.add_argument("--round-length", type=float, default=2.0)
    ap.add_argument("--policy", default="max_min_fairness")
    ap.add_argument("--executor", default="local")
    ap.add_argument("--repeats", type=int, default=1, help="real/sim pairs after the calibration")
    args = ap.parse_args(argv)

    from optsched.runtime.loop import RunConfig, run
    from optsched.sim import simulate
    from optsched.traces.io import read_trace

    work = Path(tempfile.mkdtemp(prefix="optsched-fidelity-"))
    cfg = RunConfig(policy=args.policy, round_length=args.round_length, grace=5.0, max_time=600)
    print(f"trace {args.trace}  cluster {args.cluster}  rounds of {args.round_length:g} s  policy {args.policy}  "
          f"executor {args.executor}  ({os.cpu_count()} cores)")
    cal = run(args.trace, args.executor, cfg, cluster=args.cluster, run_dir=str(work / "cal"))
    if cal.summary["jobs_completed"] != len(cal.jobs):
        print("calibration run: not every job finished", file=sys.stderr)
        return 1
    calibrated = work / "calibrated.csv"
    cal.measured_trace(calibrated)
    trace = read_trace(calibrated)

    rows = []
    for rep in range(args.repeats):
        real = run(trace, args.executor, RunConfig(**{**cfg.__dict__, "throughputs": "trace"}), cluster=args.cluster,
                   run_dir=str(work / f"real{rep}"))
        rs = real.summary
        thr = dict(zip(real.jobs["job_id"], real.jobs["measured_throughput"]))
        overhead = float(rs["restart_overhead_mean"])
        sim = simulate(trace, args.cluster, policy=args.policy, round_length=args.round_length,
                       restart_overhead=overhead, progress_rate=lambda rj: thr[rj.job_id] * rj.n_gpus / rj.scale_factor)
        sj = dict(zip(sim.jobs["job_id"], sim.jobs["jct"]))
        # A prediction: the calibration run's speeds only (the trace's durations), same overhead.
        pred = simulate(trace, args.cluster, policy=args.policy, round_length=args.round_length,
                        restart_overhead=overhead)
        pj = dict(zip(pred.jobs["job_id"], pred.jobs["jct"]))
        print(f"\nrun {rep + 1}: measured restart overhead {overhead:.2f} s (launch → first step "
              f"{rs['launch_overhead_mean']:.2f} s, checkpoint + exit {rs['stop_latency_mean']:.2f} s), "
              f"{rs['preemptions']} preemptions real / {sim.summary.get('preemptions', '?')} simulated")
        print(f"{'job':6} {'steps':>6} {'steps/s':>8} {'real JCT':>9} {'sim JCT':>8} {'predicted':>10}")
        for r in real.jobs.itertuples(index=False):
            print(f"{r.job_id:6} {r.steps_total:>6} {r.measured_throughput:>8.0f} {r.jct:>9.2f} {sj[r.job_id]:>8.2f} "
                  f"{pj[r.job_id]:>10.2f}")
        real_avg, sim_avg, pred_avg = float(rs["avg_jct"]), float(sim.summary["avg_jct"]), float(pred.summary["avg_jct"])
        diff, pdiff = (sim_avg - real_avg) / real_avg, (pred_avg - real_avg) / real_avg
        rows.append((real_avg, sim_avg, diff, pdiff))
        print(f"avg JCT: real {real_avg:.2f} s, simulated {sim_avg:.2f} s ({diff:+.1%}), predicted from the "
              f"calibration speeds {pred_avg:.2f} s ({pdiff:+.1%}); makespan real {rs['makespan']:.2f} s, "
              f"simulated {sim.summary['makespan']:.2f} s")
    if len(rows) > 1:
        d, p = np.array([r[2] for r in rows]), np.array([r[3] for r in rows])
        print(f"\n{len(rows)} runs: avg JCT difference simulated {d.mean():+.1%} mean, {np.abs(d).max():.1%} max; "
              f"predicted {p.mean():+.1%} mean, {np.abs(p).max():.1%} max")
    return 0


if __name__ == "__main__":
    sys.exit(main())
