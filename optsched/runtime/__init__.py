"""Real execution for the scheduling pipeline (``optsched run``)."""
