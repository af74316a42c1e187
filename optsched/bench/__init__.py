"""`optsched bench`: the scale benchmark, in the package (bench/ scripts are not installed).

Every case draws many instances (the peers' own data — Gavel's throughput table,
Philly's job sizes, Sia's and Pollux's application profiles — and distinct random
rows, congested and not) and solves each with optsched's path and, where one
exists, a reference written here the peer-style way (Gavel-style cvxpy + ECOS
for the fractional policies, the configuration MILP as Sia solves it, a
Pollux-style genetic algorithm, packing with every admissible pair), in the same
process on the same instances: CPU seconds p50 / p99 / max, ratios of medians
and objective gaps from one run. See ``optsched.bench.runner``.
"""

from optsched.bench.runner import CASES_FULL, CASES_QUICK, BenchRow, compare, run_cases, write_csv

__all__ = ["BenchRow", "CASES_FULL", "CASES_QUICK", "compare", "run_cases", "write_csv"]
