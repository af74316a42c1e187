"""examples/scheduler_loop.py, run against a real server: every job runs in one
copy at a time — a migrated job is stopped before it is launched on its new
GPUs (it was relaunched while still running: two copies) — and every job
finishes."""

from __future__ import annotations

import importlib.util

from optsched.service.process import ServerProcess
from tests.conftest import ROOT


def load_example():
    spec = importlib.util.spec_from_file_location("scheduler_loop", ROOT / "examples" / "scheduler_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scheduler_loop_stops_a_migrated_job_before_relaunching_it(tmp_path, capsys):
    example = load_example()

    class Recording(example.ToyRuntime):
        def __init__(self):
            super().__init__()
            self.events: list[tuple[str, str]] = []
            self.most = 0

        def launch(self, job, gpus):
            super().launch(job, gpus)  # raises if the job already runs
            self.events.append(("launch", job))
            self.most = max(self.most, len(self.running))

        def stop(self, job, why="preempt"):
            super().stop(job, why)
            self.events.append((why, job))

    runtime = Recording()
    with ServerProcess(tmp_path / "sessions.db") as srv:
        example.loop(srv.url, runtime=runtime)
    out = capsys.readouterr().out
    assert "all 5 jobs finished" in out
    migrated = [job for why, job in runtime.events if why == "migrate"]
    assert migrated, "the example's queue migrates a job (lm moves from k80 to v100 in round 4)"
    for job in migrated:
        i = runtime.events.index(("migrate", job))
        assert ("launch", job) in runtime.events[i + 1:]
    assert runtime.running == {} and runtime.most <= 5


def test_the_toy_runtime_refuses_a_second_copy():
    import pytest

    example = load_example()
    rt = example.ToyRuntime()
    rt.launch("a", [{"server": "s", "gpu": 0}])
    with pytest.raises(RuntimeError, match="a second copy"):
        rt.launch("a", [{"server": "s", "gpu": 1}])
