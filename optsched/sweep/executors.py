"""Executors: each takes the runs to do and yields payloads as they finish.

- ``serial``: in this process, one after the other (the speed-up baseline).
- ``local`` (default): ``concurrent.futures.ProcessPoolExecutor`` with the
  spawn start method, ``workers`` processes (default: the machine's cores,
  at most the number of runs). A worker process that dies (a crash, the OOM
  killer) fails only the run it was running: the pool is rebuilt for the rest.
- ``ray``: one ``ray.remote`` task per run (``num_cpus=1``). ``address`` joins
  an existing cluster (``ray.init(address=...)``); otherwise a local Ray with
  ``workers`` CPUs is started and shut down afterwards. The tasks return the
  tables to the driver, which writes the folders: no shared filesystem needed.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Iterator

from optsched.model import OptschedError
from optsched.sweep.worker import execute, init_worker


def _failed(run: dict, e: BaseException) -> dict:
    return {"run": run, "status": "failed", "error": f"{type(e).__name__}: {e}".splitlines()[0], "run_seconds": float("nan")}


def serial(runs: list[dict], workers: int | None = None) -> Iterator[dict]:
    for run in runs:
        yield execute(run)


def local(runs: list[dict], workers: int | None = None) -> Iterator[dict]:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    n = max(1, min(workers or os.cpu_count() or 1, len(runs)))
    pending = list(runs)
    while pending:
        with ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"), initializer=init_worker) as pool:
            futures = {pool.submit(execute, r): r for r in pending}
            pending = []
            broken = False
            try:
                while futures:
                    finished, _ = wait(futures, return_when=FIRST_COMPLETED)
                    for f in finished:
                        run = futures.pop(f)
                        try:
                            yield f.result()
                        except BrokenProcessPool as e:
                            if not broken:  # the run whose worker died is failed; the others are retried
                                broken = True
                                yield _failed(run, RuntimeError(f"worker process died ({e})"))
                            else:
                                pending.append(run)
                        except Exception as e:  # noqa: BLE001
                            yield _failed(run, e)
            except BaseException:  # Ctrl-C, or the consumer stopped: no run starts after this
                _stop(pool)
                raise


def _stop(pool) -> None:
    """Cancel the queued runs and end the running ones now: leaving the ``with`` block
    waited for every queued run (a Ctrl-C'd sweep ran to its end, then dropped the results)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # (shutdown forgets them)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:  # runs already handed to a worker
        proc.terminate()


def ray(runs: list[dict], workers: int | None = None, address: str | None = None) -> Iterator[dict]:
    try:
        import ray as _ray
    except ModuleNotFoundError:
        from optsched.extras import message

        raise OptschedError(message("--executor ray", "ray")) from None
    started = False
    if not _ray.is_initialized():
        if address:
            _ray.init(address=address, log_to_driver=False)
        else:
            _ray.init(num_cpus=workers or os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
            started = True
    try:
        remote = _ray.remote(num_cpus=1, max_retries=0)(execute)
        refs = {remote.remote(r): r for r in runs}
        while refs:
            ready, _ = _ray.wait(list(refs), num_returns=1)
            for ref in ready:
                run = refs.pop(ref)
                try:
                    yield _ray.get(ref)
                except Exception as e:  # noqa: BLE001 — a task or worker failure fails only its run
                    yield _failed(run, e)
    finally:
        if started:
            _ray.shutdown()


def concurrency(spec, left: int) -> int:
    """How many of ``left`` runs the spec's executor runs at once (its pool
    keeps every worker busy while runs are queued): the progress bar's
    "running" count. A Ray cluster given by address counts as ``workers`` or
    this machine's CPUs (its size is not known here)."""
    if left <= 0:
        return 0
    if spec.executor == "serial":
        return 1
    return max(1, min(spec.workers or os.cpu_count() or 1, left))


def executor_for(spec) -> Callable[[list[dict]], Iterable[dict]]:
    if spec.executor == "serial":
        return lambda runs: serial(runs)
    if spec.executor == "ray":
        return lambda runs: ray(runs, spec.workers, spec.address)
    return lambda runs: local(runs, spec.workers)
