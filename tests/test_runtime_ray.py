"""The Ray executor of ``optsched run`` on a local Ray instance with logical
GPU resources: real short jobs with preemptions, a crashed job. Skipped with
a reason only where Ray is not installed (``pip install 'optsched[ray]'``;
the ``test`` extra installs it)."""

from __future__ import annotations

import json
import os
import time

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'optsched[ray]')")
# subprocess (fork + exec) after JAX was imported by another test module: exec follows at once.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")

from test_runtime import (HANG, assert_full_progress, assert_no_slot_shared, regression_job,  # noqa: E402
                          wait_gone)

from optsched.runtime.loop import run  # noqa: E402
from optsched.runtime.workloads.regression import digest, train  # noqa: E402


def test_ray_run_preempts_resumes_and_reports_a_crash(tmp_path):
    run_dir = str(tmp_path / "run")
    steps = 300
    # sleep_ms=5: each job needs about 2 s of 1 s rounds (a launch in a warm worker takes tenths of a
    # second), mostly waiting, so the 5 jobs on 2 slots rotate even on a loaded 2-core machine.
    jobs = [regression_job("j0", steps, sleep_ms=5), regression_job("j1", steps, sleep_ms=5),
            regression_job("j2", steps, arrival=0.5, sleep_ms=5),
            regression_job("crash", 300, arrival=0.5, crash_at=30),
            regression_job("wide", steps, arrival=1.0, scale_factor=2, sleep_ms=5)]
    res = run(jobs, "ray", cluster="slot=2", round_length=1.0, grace=3.0, run_dir=run_dir,
              max_time=HANG)  # (a bound only a hang reaches: 90 s ran out beside the other workers at load 35)
    s = res.summary
    assert s["executor"] == "ray"
    by = res.jobs.set_index("job_id")
    assert by.loc["crash", "status"] == "failed" and "injected crash" in by.loc["crash", "error"]
    ok = ["j0", "j1", "j2", "wide"]
    assert_full_progress(res, run_dir, ok)
    want = digest(train(steps))
    for j in ("j0", "j1", "j2", "wide"):
        assert json.load(open(os.path.join(run_dir, "jobs", j, "result.json")))["digest"] == want
    assert s["preemptions"] >= 1
    assert_no_slot_shared(res)
    assert wait_gone(run_dir) == []
    import ray

    assert not ray.is_initialized()  # the executor shut its local Ray down


def test_ray_launches_run_in_warm_workers_also_after_a_kill_before_the_job_started(tmp_path):
    """Every launch runs in a worker warmed at start and succeeds, also right
    after a launch on the same slot was killed before its task started the job
    (the runtime cancels an incarnation revoked before its first step), and no
    job process is left behind. Before, the warm-up (no GPUs) warmed workers Ray
    does not give GPU tasks, and such a kill (a forced ray.cancel) killed the
    task's worker after Ray had reported the task cancelled: the next launch on
    the slot could land on the dying worker and fail ('signal 9'), and launches
    waited for cold workers, longer than a 1 s round on a loaded machine, so
    jobs were cancelled round after round until max_time."""
    from optsched.model import GpuSlot
    from optsched.runtime.executor import Launch
    from optsched.runtime.job import write_json_atomic
    from optsched.runtime.ray_executor import LAUNCHER_FILE, RayExecutor

    ex = RayExecutor("slot=2")
    ex.start()
    try:
        warm = set(ex.warm_workers)
        assert len(warm) == 2  # one per slot

        def launch(name: str, gpu: int):
            d = tmp_path / name
            d.mkdir()
            write_json_atomic(str(d / "lease.json"), {"expires": time.time() + HANG, "revoked": False})
            job = regression_job(name, 50)
            return ex.launch(Launch(name, job.command, (GpuSlot(server="local-slot", gpu_type="slot", gpu=gpu),),
                                    str(d), {"OPTSCHED_INCARNATION": "0"}))

        for gpu in (0, 1):
            h = launch(f"cancelled{gpu}", gpu)
            h.kill()  # at once: its task has not started the job yet (or has just started it)
            assert h.poll() is not None
        hs = [launch(f"ok{gpu}", gpu) for gpu in (0, 1)]
        deadline = time.time() + HANG  # (a bound only a hang reaches)
        while time.time() < deadline and any(h.poll() is None for h in hs):
            time.sleep(0.02)
        assert [h.poll() for h in hs] == [0, 0]
        workers = {json.loads((tmp_path / f"ok{gpu}" / LAUNCHER_FILE).read_text())["worker"] for gpu in (0, 1)}
        assert workers <= warm, (workers, warm)
    finally:
        ex.close()
    assert wait_gone(str(tmp_path)) == []


def test_a_local_ray_that_timed_out_starting_is_started_again(monkeypatch):
    """Ray's raylet waits a fixed time for its agents, whatever the load: on a busy machine the
    start failed ('The current node timed out during startup') and so did the run. The executor
    starts it again, up to START_ATTEMPTS times, and then says why in one line."""
    from types import SimpleNamespace

    from optsched.model import OptschedError
    from optsched.runtime import ray_executor
    from optsched.runtime.ray_executor import START_ATTEMPTS, RayExecutor

    def fake_ray(failures: int):
        calls = []

        def init(**kw):
            calls.append(kw)
            if len(calls) <= failures:
                raise Exception("The current node timed out during startup. This could happen because ...")

        return SimpleNamespace(is_initialized=lambda: False, init=init, shutdown=lambda: None), calls

    fake, calls = fake_ray(START_ATTEMPTS - 1)
    monkeypatch.setattr(ray_executor, "_ray", lambda: fake)
    ex = RayExecutor("slot=2")
    ex._init()
    assert len(calls) == START_ATTEMPTS and ex._started
    assert calls[-1]["resources"] == {"optsched_slot_local_slot_0": 1.0, "optsched_slot_local_slot_1": 1.0}
    fake, calls = fake_ray(START_ATTEMPTS)
    monkeypatch.setattr(ray_executor, "_ray", lambda: fake)
    with pytest.raises(OptschedError, match=f"^--executor ray: the local Ray did not start in {START_ATTEMPTS} "):
        RayExecutor("slot=2")._init()
    assert len(calls) == START_ATTEMPTS

    def other(**kw):  # any other failure is Ray's own, at once
        raise RuntimeError("no space left on device")

    monkeypatch.setattr(ray_executor, "_ray", lambda: SimpleNamespace(is_initialized=lambda: False, init=other,
                                                                    shutdown=lambda: None))
    with pytest.raises(RuntimeError, match="no space left"):
        RayExecutor("slot=2")._init()
