"""A trace mixing rigid jobs (throughput rows) and elastic jobs (goodput
profiles) runs in the one simulator: each job is what its data says."""

from __future__ import annotations

import numpy as np
import pytest

from optsched.sim import simulate
from optsched.traces.throughputs import ThroughputTable
from optsched.traces.trace import make_trace

# rigid job types on the cluster's one GPU type ("gpu", Pollux's profiles' type)
TABLE = ThroughputTable(alone={("ResNet", 1): {"gpu": 10.0}, ("ResNet", 2): {"gpu": 18.0}}, gpu_types=("gpu",))


def _mixed():
    inf, nan = np.inf, np.nan
    return make_trace(
        {"job_id": ["r0", "e0", "r1", "e1"], "arrival_time": [0.0, 10.0, 20.0, 30.0],
         "model": ["ResNet", "ncf", "ResNet", "ncf"],
         "scale_factor": [1, 1, 2, 1], "steps_total": [20_000.0, inf, 30_000.0, inf], "duration": [nan] * 4},
        "mixed", "test", extra={"batch_size": [nan, 256.0, nan, 256.0]},
    )


@pytest.mark.parametrize("policy", ["max_min_fairness", "pollux"])
def test_mixed_trace_runs_rigid_and_elastic_jobs_to_completion(peer_data, policy):
    r = simulate(_mixed(), "gpu=4", policy=policy, throughputs=TABLE)
    jobs = r.jobs.set_index("job_id")
    assert list(jobs["kind"]) == ["rigid", "elastic", "rigid", "elastic"]
    assert r.summary["jobs_completed"] == 4 and r.summary["elastic_jobs"] == 2
    assert (jobs["completion_time"] > jobs["arrival_time"]).all()
    assert jobs.loc[["e0", "e1"], "epochs"].tolist() == [10, 10]  # ncf runs its 10 epochs
    assert jobs.loc[["r0", "r1"], "steps_done"].tolist() == [20_000.0, 30_000.0]
    assert r.summary["round_length"] == 60.0  # the trace has elastic jobs
