"""A scheduler's loop with optsched as its allocation backend, over HTTP.

    admission → next round → launch / preempt / migrate → report progress → …

The "cluster" here is a toy runtime (jobs advance at their throughput);
replace ``ToyRuntime.launch``/``stop`` with your runtime's calls. A migrated
job is stopped (checkpointed) before it is launched on its new GPUs, so two
copies never run. Runs against a server given by --url, or starts one on a
free loopback port:

    python examples/scheduler_loop.py
    optsched serve --port 8470 &  python examples/scheduler_loop.py --url http://127.0.0.1:8470
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from optsched.client import Client, ServiceError
from optsched.service.process import ServerProcess

CLUSTER = {"gpus": {"v100": 4, "k80": 4}}
QUEUE = [  # (arrival round, job): what a user would submit
    (0, {"id": "resnet", "throughput": {"v100": 10.0, "k80": 3.0}, "steps_total": 9000}),
    (0, {"id": "bert", "scale_factor": 2, "throughput": {"v100": 4.0, "k80": 1.0}, "steps_total": 4000}),
    (0, {"id": "lm", "scale_factor": 4, "throughput": {"v100": 6.0, "k80": 2.0}, "steps_total": 6000}),
    (1, {"id": "gan", "throughput": {"v100": 8.0, "k80": 4.0}, "steps_total": 5000, "weight": 2.0}),
    (2, {"id": "rl", "scale_factor": 2, "throughput": {"v100": 5.0, "k80": 2.5}, "steps_total": 3000}),
]
ROUND = 360.0


class ToyRuntime:
    """Where jobs run: replace with your runtime (Kubernetes, Slurm, Ray, processes)."""

    def __init__(self):
        self.running: dict[str, list[dict]] = {}  # job -> the GPUs its one copy runs on

    def launch(self, job: str, gpus: list[dict]) -> None:  # start the job on these GPUs (resume from checkpoint)
        if job in self.running:
            raise RuntimeError(f"{job} is already running: a second copy would start")
        self.running[job] = gpus
        print(f"    launch  {job:7} on " + " ".join(f"{g['server']}:{g['gpu']}" for g in gpus))

    def stop(self, job: str, why: str = "preempt") -> None:  # checkpoint and stop
        self.running.pop(job)
        print(f"    {why:7} {job}")

    def finished(self, job: str) -> None:  # the job exited by itself
        self.running.pop(job, None)


def loop(url: str, token: str | None = None, runtime: ToyRuntime | None = None) -> None:
    runtime = runtime or ToyRuntime()
    with Client(url, token=token) as client:
        session = client.session(CLUSTER, policy="max_min_fairness", round_length=ROUND)
        specs = {j["id"]: j for _, j in QUEUE}
        r = 0
        while True:
            arrivals = [j for at, j in QUEUE if at == r]  # admission: accept everything that arrived
            if arrivals:
                session.submit(arrivals)
            rnd = session.next_round()
            placement = rnd["placement"]
            if not placement and r > max(at for at, _ in QUEUE):
                break
            used = sum(len(g) for g in placement.values())
            print(f"round {rnd['round']} t={rnd['time']:.0f}s  {used}/8 GPUs  recomputed={rnd['recomputed']}")
            for job in rnd["preempted"]:
                runtime.stop(job)
            for job in rnd["migrated"]:  # stop it where it runs, then start it on its new GPUs
                runtime.stop(job, "migrate")
            for job in rnd["started"] + rnd["migrated"]:
                runtime.launch(job, placement[job])
            # The round runs; each job reports what it did (a job that finishes early says how long it ran).
            reports = []
            for job, gpus in placement.items():
                rate = specs[job]["throughput"][gpus[0]["gpu_type"]]
                left = specs[job]["steps_total"] - session.job(job)["steps_done"]
                secs = min(ROUND, left / rate)
                reports.append({"job_id": job, "steps": rate * secs, **({"seconds": secs} if secs < ROUND else {})})
            for j in session.report(reports):
                if j["status"] == "finished":
                    runtime.finished(j["id"])
                    print(f"    done    {j['id']:7} at t={j['finish_time']:.0f}s, "
                          f"{j['attained_service'] / 3600:.2f} GPU-hours")
            r += 1
        print(f"all {session.state()['finished_jobs']} jobs finished after {r} rounds")


def main() -> None:
    ap = argparse.ArgumentParser(description="A scheduler loop against `optsched serve`.")
    ap.add_argument("--url", help="A running server (default: start one on a free port).")
    ap.add_argument("--token", help="Bearer token of that server.")
    args = ap.parse_args()
    if args.url:
        try:
            return loop(args.url, args.token)
        except ServiceError as e:  # e.g. a token-protected server without --token / OPTSCHED_TOKEN
            raise SystemExit(f"error: {e}") from None
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp) / "sessions.db") as srv:
        loop(srv.url)


if __name__ == "__main__":
    main()
