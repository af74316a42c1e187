"""A small CPU training job: linear regression by minibatch SGD in NumPy.

    python -m optsched.runtime.workloads.regression --steps 500 [--work 2]

(``optsched run`` starts it as a file, ``python .../regression.py``, which
loads the job library without importing the optsched package: a faster
restart.)

Each step computes the gradient of the squared loss on ``--work`` minibatches
(``--batch`` rows × ``--dim`` features, a few ms per minibatch on one core)
and takes one SGD step. Minibatch ``k`` of step ``s`` is drawn from a
generator seeded by ``(seed, s, k)``, so a run preempted and resumed from its
checkpoint ends with exactly the weights of an uninterrupted run
(``result.json`` holds the final loss and a digest of the weights).

Fault injection for tests: ``--crash-at S`` raises at step S;
``--ignore-lease`` never looks at its lease (the runtime kills it after the
grace period).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time

import numpy as np

if __package__:
    from optsched.runtime.job import Lease, write_json_atomic
else:  # run as a file (what `optsched run` does): load job.py beside it, skip the optsched package's imports
    import importlib.util as _util

    _spec = _util.spec_from_file_location(
        "optsched_runtime_job", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "job.py"))
    _job = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_job)
    Lease, write_json_atomic = _job.Lease, _job.write_json_atomic


def make_problem(dim: int, seed: int) -> np.ndarray:
    return np.random.default_rng([seed, 2**31 - 1]).standard_normal(dim)


def minibatch(true_w: np.ndarray, batch: int, seed: int, step: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, step, k])
    x = rng.standard_normal((batch, true_w.size))
    y = x @ true_w + 0.01 * rng.standard_normal(batch)
    return x, y


def sgd_step(w: np.ndarray, true_w: np.ndarray, step: int, args) -> np.ndarray:
    g = np.zeros_like(w)
    for k in range(args.work):
        x, y = minibatch(true_w, args.batch, args.seed, step, k)
        g += x.T @ (x @ w - y) / args.batch
    return w - args.lr * g / args.work


def train(steps: int, work: int = 1, dim: int = 128, batch: int = 512, lr: float = 0.05, seed: int = 0) -> np.ndarray:
    """The same computation without a lease (reference for tests)."""
    args = argparse.Namespace(work=work, dim=dim, batch=batch, lr=lr, seed=seed)
    true_w = make_problem(dim, seed)
    w = np.zeros(dim)
    for s in range(steps):
        w = sgd_step(w, true_w, s, args)
    return w


def digest(w: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(w, dtype=np.float64).tobytes()).hexdigest()[:16]


def parse(argv=None):
    p = argparse.ArgumentParser(prog="optsched.runtime.workloads.regression", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, required=True, help="total SGD steps")
    p.add_argument("--work", type=int, default=1, help="minibatches per step (step time scales with it)")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sleep-ms", type=float, default=0.0,
                   help="extra wait per step (an accelerator's time the CPU does not spend)")
    p.add_argument("--crash-at", type=int, default=None, help="fault injection: raise at this step")
    p.add_argument("--ignore-lease", action="store_true", help="fault injection: never honour the lease")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    if args.work < 1 or args.steps < 0:
        raise SystemExit("--work must be >= 1 and --steps >= 0")
    true_w = make_problem(args.dim, args.seed)
    with Lease.from_env() as lease:
        state = lease.restore() or {"w": np.zeros(args.dim)}
        w = state["w"]
        if args.ignore_lease:
            steps = range(lease.steps_done, args.steps)
            lease.steps_total = args.steps
        else:
            steps = lease.steps(args.steps, checkpoint=lambda: {"w": w})
        for s in steps:
            t = time.time()
            if args.crash_at is not None and s == args.crash_at:
                raise RuntimeError(f"injected crash at step {s}")
            w = sgd_step(w, true_w, s, args)
            if args.sleep_ms:
                time.sleep(args.sleep_ms / 1000)
            if args.ignore_lease:
                lease.step_done(time.time() - t)
        x, y = minibatch(true_w, args.batch, args.seed, 2**31, 0)
        loss = float(np.mean((x @ w - y) ** 2))
        write_json_atomic(os.path.join(lease.job_dir, "result.json"),
                          {"steps": lease.steps_done, "loss": loss, "digest": digest(w)})


if __name__ == "__main__":
    main()
