"""A cold process reports loading modules as import_seconds, never as solve time
(docs/guide/solve.md, `--json` timings): every policy's solve imports nothing heavy after the
engine's timed-apart loading (the policy module and its IMPORTS / imports(options);
a formulation's LP backend, block_lp.preload)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from optsched import policy

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "snapshot.json"
HEAVY = ("cvxpy", "scipy", "pandas", "jax", "jaxlib", "highspy", "clarabel", "ortools", "sklearn", "pyarrow",
         "interpret", "matplotlib")

# In a fresh interpreter: note sys.modules after the engine's last timed-apart load, solve, and
# print the heavy packages first imported later (inside a timer) and the timings.
PROBE = textwrap.dedent("""
    import json, sys
    import optsched
    from optsched import policy as P
    seen = {"after": set(sys.modules)}
    for name in ("load_modules", "preload"):
        def wrapped(*a, _orig=getattr(P, name), **k):
            out = _orig(*a, **k)
            seen["after"] = set(sys.modules)
            return out
        setattr(P, name, wrapped)
    a = optsched.solve(json.load(open(sys.argv[2])), policy=sys.argv[1])
    heavy = set(sys.argv[3].split(","))
    # A package first imported inside a timer, or one of scipy's subpackages (each a package of
    # its own size: scipy.optimize, scipy.stats); other packages' lazy submodules are small.
    def names(mods):
        return {".".join(m.split(".")[:2]) if m.startswith("scipy.") else m.split(".")[0] for m in mods}
    late = sorted(m for m in names(sys.modules) - names(seen["after"]) if m.split(".")[0] in heavy)
    print(json.dumps({"late": late, "status": a.status, "import": a.import_seconds, "solve": a.solve_seconds}))
""")


def _one_per_import_set() -> list[str]:
    """One policy per (module, options that change its imports): a subprocess each."""
    picked: dict[tuple, str] = {}
    for name in sorted(policy.POLICIES):
        module, options = policy.POLICIES[name]
        key = (module, options.get("discretization"))
        picked.setdefault(key, name)
    return sorted(picked.values())


def _cold_solve(case: tuple[str, Path]) -> dict:
    name, snapshot = case
    out = subprocess.run([sys.executable, "-c", PROBE, name, str(snapshot), ",".join(HEAVY)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{name}: {out.stderr[-2000:]}"
    return {"policy": name, "snapshot": snapshot.name, **json.loads(out.stdout.strip().splitlines()[-1])}


def _large_snapshot(path: Path, n: int = 1100) -> Path:
    """Rigid jobs enough that `auto` picks the structured IPM (n × k above block_lp.AUTO_IPM_ENTRIES),
    with the fields every program reads (steps, prices)."""
    import numpy as np

    rng = np.random.default_rng(0)
    types = ("v100", "p100", "k80")
    jobs = [{"id": f"j{m}", "steps_total": float(rng.uniform(1e3, 1e6)),
             "throughput": {t: float(rng.uniform(0.5, 5.0)) for t in types}} for m in range(n)]
    path.write_text(json.dumps({"cluster": {"gpus": {t: n // 6 for t in types},
                                            "price_per_hour": {"v100": 2.48, "p100": 1.46, "k80": 0.45}},
                                "jobs": jobs}))
    return path


def test_no_policy_imports_a_heavy_module_inside_its_timers(tmp_path):
    from optsched.solvers.block_lp import AUTO_IPM_ENTRIES

    names = _one_per_import_set()
    assert {"hadar", "lucid", "tiresias_gittins", "fifo", "max_min_fairness"} <= set(names)
    large = _large_snapshot(tmp_path / "large.json")
    assert 1100 * 3 > AUTO_IPM_ENTRIES
    # Programs (no allocate) also at a size where auto picks the IPM: their backend differs there.
    programs = [n for n in names if not hasattr(policy._module(n)[0], "allocate")]
    cases = [(n, EXAMPLE) for n in names] + [(n, large) for n in programs]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(_cold_solve, cases))
    late = {(r["policy"], r["snapshot"]): r["late"] for r in results if r["late"]}
    assert not late, f"imported inside solve_seconds (declare IMPORTS / imports(options)): {late}"
    assert all(r["status"] in ("optimal", "ok") for r in results), results
    # Loading cvxpy (hadar) takes far longer than its 12-job MILP: it is reported apart.
    hadar = next(r for r in results if r["policy"] == "hadar")
    assert hadar["import"] > 0.0


def test_a_plugin_whose_imports_are_not_installed_is_one_line(monkeypatch, tmp_path):
    (tmp_path / "tests_plugin_missing").mkdir()
    (tmp_path / "tests_plugin_missing" / "__init__.py").write_text("")
    (tmp_path / "tests_plugin_missing" / "p.py").write_text(
        "IMPORTS = ('no_such_module_xyz',)\n\ndef allocate(inst, **_):\n    raise AssertionError('not reached')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(policy.POLICIES, "missing_xyz", ("tests_plugin_missing.p", {}))
    from optsched.model import Instance, OptschedError, parse_snapshot

    inst = Instance.from_snapshot(parse_snapshot(EXAMPLE.read_text()))
    with pytest.raises(OptschedError, match=r"^policy: 'missing_xyz' needs the module 'no_such_module_xyz', "
                                            r"which is not installed$"):
        policy.solve_instance(inst, "missing_xyz")


def test_a_declared_import_is_import_seconds_not_solve_seconds(tmp_path, monkeypatch):
    """A plugin policy whose IMPORTS take 2 s to load: a cold solve reports them
    as import_seconds, and solve_seconds is the procedure alone (a few ms; the 2 s
    margin holds on a machine however busy)."""
    (tmp_path / "slow_dependency_xyz.py").write_text("import time\ntime.sleep(2.0)\n")
    (tmp_path / "tests_plugin").mkdir()
    (tmp_path / "tests_plugin" / "__init__.py").write_text("")
    (tmp_path / "tests_plugin" / "slow_policy_xyz.py").write_text(textwrap.dedent("""
        import numpy as np
        from optsched.model import Allocation
        IMPORTS = ("slow_dependency_xyz",)

        def allocate(inst, policy="slow", solver="auto", time_limit=60.0):
            import slow_dependency_xyz  # noqa: F401 (loaded already: free)
            return Allocation.of(inst, policy, np.full((inst.n, inst.k), 1.0 / max(inst.n, 1)), "ok", 0.0, 0.0)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(policy.POLICIES, "slow_xyz", ("tests_plugin.slow_policy_xyz", {}))
    monkeypatch.delitem(sys.modules, "slow_dependency_xyz", raising=False)
    from optsched.model import Instance, parse_snapshot

    inst = Instance.from_snapshot(parse_snapshot(EXAMPLE.read_text()))
    alloc = policy.solve_instance(inst, "slow_xyz")
    assert alloc.import_seconds >= 2.0
    assert alloc.solve_seconds < 2.0
    assert alloc.solver_seconds == pytest.approx(alloc.solve_seconds - alloc.decode_seconds, abs=1e-9)
    again = policy.solve_instance(inst, "slow_xyz")
    assert again.import_seconds < 2.0  # loaded once per process
