"""Reading CSV traces so that a bad cell names its row (line in the file)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from optsched.model import OptschedError


def read_csv_checked(path: str | os.PathLike, required: tuple[str, ...], fmt: str) -> tuple[pd.DataFrame, list[int], str]:
    """All cells as strings; rows[i] is the file line of record i (header = line 1)."""
    p = Path(path)
    where = f"{fmt} trace {p}"
    try:
        df = pd.read_csv(p, dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise OptschedError(f"{where}: empty file") from None
    except pd.errors.ParserError as e:
        raise OptschedError(f"{where}: {str(e).splitlines()[0]}") from None
    df.columns = [c.strip() for c in df.columns]
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise OptschedError(f"{where}: missing column(s) {', '.join(missing)} (header has {', '.join(df.columns)})")
    return df, list(range(2, len(df) + 2)), where
