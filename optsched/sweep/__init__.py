"""Sweeps: the cross product of simulations (trace × cluster × policy × load ×
seed), run locally in a process pool or on Ray, resumable, gathered into one
tidy table (optsched/sweep/engine.py); ``auto`` policy synthesis on top
(optsched/sweep/auto.py)."""

from optsched.sweep.engine import SweepResult, gather, run_sweep
from optsched.sweep.spec import SweepSpec, read_spec_file, spec_from_dict, validate
from optsched.sweep.worker import TIMING_COLUMNS

__all__ = ["SweepResult", "SweepSpec", "TIMING_COLUMNS", "gather", "read_spec_file", "run_sweep", "spec_from_dict",
           "validate"]
