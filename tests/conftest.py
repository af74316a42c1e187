"""Shared test helpers: peer data location and random instances."""

from __future__ import annotations

import os
from pathlib import Path

# One thread for BLAS and OpenMP (scikit-learn's GBDT): the tests' programs are
# small, and a second busy process turns OpenMP's spin-waits into minutes
# (tests/test_predict_sim_features.py: 257 s with 2 threads beside a benchmark, 10 s with 1).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import pytest

from optsched.model import Instance

ROOT = Path(__file__).resolve().parents[1]

# httpx's default timeout (5 s per request) can fail a test's request to a local server on a busy machine;
# in the tests a timeout only guards against a hang, so every request without its own gets 600 s.
import httpx  # noqa: E402

httpx.Timeout.__init__(httpx._config.DEFAULT_TIMEOUT_CONFIG, 600.0)  # (the default object httpx's functions share)


def peer_data_dir() -> Path:
    return Path(os.environ.get("OPTSCHED_PEER_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture
def peer_data() -> Path:
    """The peers' published traces and profiles (../shared/data); skip when absent."""
    d = peer_data_dir()
    if not d.is_dir():
        pytest.skip(f"peer data not found at {d} (set OPTSCHED_PEER_DATA)")
    return d


def random_instance(rng: np.random.Generator, n: int, k: int = 3, multi_gpu: bool = True, sparsity: float = 0.2) -> Instance:
    """n jobs × k types; some (job, type) pairs unavailable; scale factors 1/2/4/8."""
    T = rng.uniform(0.5, 20.0, (n, k)) * rng.uniform(0.2, 1.0, (1, k))
    T[rng.random((n, k)) < sparsity] = 0.0
    T[np.arange(n), rng.integers(0, k, n)] = rng.uniform(0.5, 20.0, n)  # every job runs somewhere
    capacity = rng.integers(8, 40, k).astype(float)
    sf = rng.choice([1, 2, 4, 8], n, p=[0.7, 0.1, 0.15, 0.05]).astype(float) if multi_gpu else np.ones(n)
    T[sf[:, None] > capacity[None, :]] = 0.0
    T[T.sum(axis=1) == 0, int(np.argmax(capacity))] = 1.0
    return Instance(
        job_ids=tuple(f"j{i}" for i in range(n)),
        gpu_types=tuple(f"t{j}" for j in range(k)),
        throughput=T,
        scale_factor=sf,
        weight=rng.choice([1.0, 2.0], n, p=[0.8, 0.2]),
        capacity=capacity,
        steps_remaining=rng.uniform(1e3, 1e6, n),
        elapsed_time=rng.uniform(0, 1e4, n),
        attained_service=rng.uniform(0, 1e5, n),
        arrival_time=np.zeros(n),
    )


# Property tests draw the same examples on every run (CI must not flake), and
# failures found once are pinned with @example in the test itself.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("optsched", derandomize=True, print_blob=True)
_hypothesis_settings.register_profile("explore", derandomize=False, max_examples=300, print_blob=True)  # bug hunting
_hypothesis_settings.load_profile(os.environ.get("OPTSCHED_HYPOTHESIS_PROFILE", "optsched"))


# ---------------------------------------------------------------- parallel runs (pytest-xdist)
# `make test` runs the suite on several workers with `--dist loadgroup`: each test goes to the
# next free worker, except the tests of one group, which run on one worker in file order. A file
# is one group when its tests share more than a test: a module-scoped server, Slurm cluster (each
# file starts its own, in a private folder on free ports: tests/_slurm_private.py) or expensive result; state one test leaves
# for the next; a page whose blocks run in order in one scratch folder (the README, each docs page).
# Ray's tests are one group: one local Ray instance at a time. Any other test may run beside any
# other, so none may depend on how busy the machine is (the real-time tests pace their jobs by
# waiting, and count events, never seconds). The groups are read off the test ids by the scheduler
# below, not from xdist_group marks: pytest 9.2 no longer lets pytest-xdist 3.8 add a mark's group
# to a test's id, so such marks are silently ignored.
ONE_WORKER_FILES = frozenset({
    "test_slurm_agent.py", "test_slurm_executor.py", "test_slurm_cluster.py",  # a cluster per file
    "test_readme.py",  # blocks in README order, one scratch folder
    "test_dashboard.py", "test_dashboard_firefox.py", "test_service_http.py",  # a module-scoped `optsched serve`
    "test_determinism_load.py", "test_docs_build.py", "test_report.py", "test_cli_polish_nan.py",  # costly module fixtures
})
RAY_FILES = frozenset({"test_runtime_ray.py", "test_sweep.py"})  # (test_sweep.py: Ray beside its module's local sweep)
DOCS_BLOCK = "test_docs_block["


def xdist_group(nodeid: str) -> str | None:
    """The group of the test ``nodeid`` (tests/test_x.py::name[params]); None: any worker."""
    path, _, name = nodeid.partition("::")
    file = path.rsplit("/", 1)[-1]
    if file in RAY_FILES:
        return "ray"
    if file == "test_docs.py" and name.startswith(DOCS_BLOCK):  # its id: test_docs_block[PAGE:L12-sh]
        return "docs:" + name[len(DOCS_BLOCK):].rsplit(":L", 1)[0]
    return file if file in ONE_WORKER_FILES else None


# Long single tests (a solve of tens of CPU seconds, real jobs that wait) go out first, right after the
# groups (the scheduler sends the largest first): dealt last, one of them would be the run's tail.
LONG_FIRST = ("tests/test_water_filling_warm.py", "tests/test_one_core.py", "tests/test_runtime.py",
              "tests/test_service_load.py", "tests/test_cli_elastic.py", "tests/test_allocator_state.py")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # (every worker sorts alike: their collections must agree)
        items.sort(key=lambda item: not item.nodeid.startswith(LONG_FIRST))


@pytest.hookimpl(optionalhook=True)  # (a hook of pytest-xdist: absent from a run without it)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """One work unit per group (largest first: they start early) and per ungrouped test."""

        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid) or nodeid

    return GroupScheduling(config, log)
