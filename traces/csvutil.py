"""Reading trace files so that a bad file or cell is one line naming its row
(line in the file): undecodable bytes, a truncated ``.gz``, a malformed CSV."""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from pathlib import Path

import pandas as pd

from optsched.model import OptschedError

MAX_TRACE_BYTES = 1 << 30  # 1 GiB of (decompressed) text: far above any published trace


def read_bytes(path: str | os.PathLike, where: str, limit: int) -> bytes:
    """Up to ``limit`` bytes of the file (``.gz`` decompressed), or OptschedError:
    a truncated .gz, a directory or an unreadable file is one line naming ``where``."""
    p = Path(path)
    try:
        with (gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")) as f:
            return f.read(limit)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise OptschedError(f"{where}: not a valid gzip file ({str(e) or 'truncated'})") from None
    except IsADirectoryError:
        raise OptschedError(f"{where}: is a directory") from None
    except OSError as e:
        raise OptschedError(f"{where}: cannot read ({e.strerror or e})") from None


def read_text(path: str | os.PathLike, where: str) -> str:
    """The whole file as text (``.gz`` decompressed), or OptschedError naming what is wrong."""
    data = read_bytes(path, where, MAX_TRACE_BYTES + 1)
    if len(data) > MAX_TRACE_BYTES:
        raise OptschedError(f"{where}: larger than the limit of {MAX_TRACE_BYTES >> 20} MiB of text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise OptschedError(f"{where}: row {line}: not UTF-8 text (byte {e.start})") from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise OptschedError(f"{where}: row {line}: NUL byte (not a text file)")
    return text


def _long_row(text: str, header: int) -> str:
    """'row L: F fields where the header has H' for the first record longer than the header (L: its file line)."""
    import csv

    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    records = ((reader.line_num, r) for r in reader if r)  # (pandas skips blank lines too)
    head = next(records, None)
    for line, r in records:
        if head is not None and len(r) > len(head[1]):
            return f"row {line}: {len(r)} fields where the header has {len(head[1])}"
    return f"a row has more fields than the header's {header}"


def read_csv_checked(path: str | os.PathLike, required: tuple[str, ...], fmt: str) -> tuple[pd.DataFrame, list[int], str]:
    """All cells as strings; rows[i] is the file line of record i (header = line 1)."""
    p = Path(path)
    where = f"{fmt} trace {p}"
    text = read_text(p, where)
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise OptschedError(f"{where}: empty file") from None
    except (pd.errors.ParserError, ValueError, csv_error()) as e:
        first = (str(e).splitlines() or ["malformed CSV"])[0]
        fields = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", first)
        if fields:  # pandas' tokenizer text, in the trace's terms
            first = f"row {fields[2]}: {fields[3]} fields where the header has {fields[1]}"
        raise OptschedError(f"{where}: {first}") from None
    if not isinstance(df.index, pd.RangeIndex):  # rows longer than the header: pandas made their first cells an index
        raise OptschedError(f"{where}: {_long_row(text, len(df.columns))}")
    df.columns = [str(c).strip() for c in df.columns]
    header = ", ".join(repr(c)[:40] for c in df.columns[:12]) + (" ..." if len(df.columns) > 12 else "")
    import csv

    raw = [c.strip() for c in next(csv.reader(io.StringIO(text), skipinitialspace=True), [])]
    dup = next((c for i, c in enumerate(raw) if c in raw[:i]), None)  # (pandas renames a repeat to "c.1")
    if dup is not None or len(set(df.columns)) != len(df.columns):
        shown = ", ".join(repr(c)[:40] for c in raw[:12]) + (" ..." if len(raw) > 12 else "")
        raise OptschedError(f"{where}: duplicate column {dup!r} in the header ({shown})")
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise OptschedError(f"{where}: missing column(s) {', '.join(missing)} (header has {header})")
    if df.empty:
        raise OptschedError(f"{where}: no jobs (only a header)")
    # A row with fewer cells than the header reads as NaN under dtype=str: name it.
    for c in required:
        na = df[c].isna().to_numpy()
        if na.any():
            i = int(na.argmax())
            raise OptschedError(f"{where}: row {i + 2}: {c} is missing (fewer cells than the header)")
    df = df.fillna("")
    return df, list(range(2, len(df) + 2)), where


def csv_error():
    import csv

    return csv.Error
