"""One module per policy: build(inst, **options) -> Formulation (a block LP and how to read it, see base.py),
or allocate(inst, solver=, time_limit=, **options) -> Allocation for procedures (water filling, priority orders, MILPs)."""
