"""One module per policy: build(inst, **options) -> Program (see base.py)."""
