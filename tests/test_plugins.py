"""Policies and placements registered by another package through entry points
(groups ``optsched.policies`` and ``optsched.placements``), found the way
importlib.metadata finds any installed distribution: a dist-info folder on sys.path."""

from __future__ import annotations

import sys
import textwrap

import pytest

from optsched.model import OptschedError, parse_snapshot

SNAP = {
    "version": 1,
    "cluster": {"gpus": {"v100": 4}, "servers": [{"id": "s0", "gpu_type": "v100", "gpus": 4}]},
    "jobs": [{"id": f"j{m}", "throughput": {"v100": 1.0 + m}} for m in range(3)],
}


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    pkg = tmp_path / "myplug"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    # A procedure policy: every job all of the time on its fastest type, scaled to fit.
    (pkg / "policy.py").write_text(textwrap.dedent('''
        import numpy as np
        from optsched.model import Allocation

        def allocate(inst, policy="fastest", solver="auto", time_limit=60.0, **options):
            X = np.zeros((inst.n, inst.k))
            X[np.arange(inst.n), inst.throughput.argmax(axis=1)] = 1.0
            used = inst.scale_factor @ X
            X *= np.minimum(1.0, inst.capacity / np.maximum(used, 1e-12))[None, :]
            return Allocation.of(inst, policy, X, "optimal", float("nan"), 0.0)
    '''))
    # Placements: highest-numbered GPUs first; and one that returns garbage.
    (pkg / "placement.py").write_text(textwrap.dedent('''
        import numpy as np

        def place(layout, widths, previous):
            free, out = list(range(layout.W))[::-1], []
            for w in widths:
                out.append(np.array(sorted(free[:w])))
                free = free[w:]
            return out

        def broken(layout, widths, previous):
            return [np.zeros(w, dtype=int) for w in widths]  # every unit on GPU 0
    '''))
    info = tmp_path / "myplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[optsched.policies]\nfastest = myplug.policy\nmax_min_fairness = myplug.policy\n\n"
        "[optsched.placements]\nreverse = myplug.placement:place\nbroken = myplug.placement:broken\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from optsched import placement

    placement._plugins.cache_clear()
    yield
    placement._plugins.cache_clear()
    for name in [m for m in sys.modules if m.startswith("myplug")]:
        del sys.modules[name]


def test_policy_registered_by_another_package_is_listed_and_solves(plugin):
    from optsched.policy import policy_names, solve

    assert "fastest" in policy_names()
    alloc = solve(parse_snapshot(SNAP), policy="fastest")
    assert alloc.status == "optimal"
    assert (alloc.fractions.sum(axis=0) <= 4 + 1e-9).all()
    assert "share_vs_fair" in alloc.explanation  # the entry point's explanation keys apply to plugins too


def test_placement_registered_by_another_package_places_and_is_checked(plugin):
    from optsched.allocator import Allocator
    from optsched.placement import placement_policies
    from optsched.policy import solve

    assert "reverse" in placement_policies()
    snap = parse_snapshot(SNAP)
    alloc = solve(snap, policy="max_min_fairness")
    placed = Allocator.from_snapshot(snap, placement="reverse").next_round(snap, alloc).to_dict()["placement"]
    used = sorted(slot["gpu"] for slots in placed.values() for slot in slots)
    assert used == sorted(range(4))[-len(used):]  # the highest-numbered GPUs, each once
    with pytest.raises(OptschedError, match="broken.*invalid placement"):
        Allocator.from_snapshot(snap, placement="broken").next_round(snap, alloc)


def test_unknown_placement_names_the_choices():
    from optsched.allocator import Allocator

    with pytest.raises(OptschedError, match="unknown policy 'nope'.*consolidated"):
        Allocator.from_snapshot(parse_snapshot(SNAP), placement="nope")


def test_builtin_names_win_over_plugins(plugin, tmp_path):
    from optsched.policy import _module

    # The plugin also registers "max_min_fairness"; the built-in keeps the name.
    mod, _ = _module("max_min_fairness")
    assert mod.__name__ == "optsched.formulations.max_min_fairness"
    assert _module("fastest")[0].__name__ == "myplug.policy"
