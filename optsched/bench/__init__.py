"""`optsched bench`: the scale benchmark, in the package (bench/ scripts are not installed).

Every case runs optsched's path and, where one exists, a reference written
here the naive or peer-style way (Gavel's vectorized cvxpy + ECOS, packing with
every admissible pair, the configuration MILP as it ran before: goodput table
rebuilt and branch-and-cut to a 1e-6 gap), so each speed-up is a ratio from
one run on one loaded machine. See ``optsched.bench.runner``.
"""

from optsched.bench.runner import CASES_FULL, CASES_QUICK, BenchRow, compare, run_cases, write_csv

__all__ = ["BenchRow", "CASES_FULL", "CASES_QUICK", "compare", "run_cases", "write_csv"]
