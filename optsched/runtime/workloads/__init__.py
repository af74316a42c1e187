"""Workloads shipped for ``optsched run``: ``python -m optsched.runtime.workloads.<name>``.

A trace names one in its model column as ``name[:key=value...]``, e.g.
``regression:work=2`` → ``python -m optsched.runtime.workloads.regression
--steps N --work 2`` (N from the trace).
"""

WORKLOADS = ("regression",)
