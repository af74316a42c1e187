"""The Ray executor of ``optsched run`` on a local Ray instance with logical
GPU resources: real short jobs with preemptions, a crashed job. Skipped with
a reason only where Ray is not installed (``pip install 'optsched[ray]'``;
the ``test`` extra installs it)."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'optsched[ray]')")
# subprocess (fork + exec) after JAX was imported by another test module: exec follows at once.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")

from test_runtime import (assert_full_progress, assert_no_slot_shared, regression_job,  # noqa: E402
                          wait_gone)

from optsched.runtime.loop import run  # noqa: E402
from optsched.runtime.workloads.regression import digest, train  # noqa: E402


def test_ray_run_preempts_resumes_and_reports_a_crash(tmp_path):
    run_dir = str(tmp_path / "run")
    steps = 300
    jobs = [regression_job("j0", steps), regression_job("j1", steps), regression_job("j2", steps, arrival=0.5),
            regression_job("crash", 300, arrival=0.5, crash_at=30),
            regression_job("wide", steps, arrival=1.0, scale_factor=2)]
    res = run(jobs, "ray", cluster="slot=2", round_length=1.0, grace=3.0, run_dir=run_dir, max_time=90)
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
