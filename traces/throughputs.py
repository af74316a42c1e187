"""Throughput tables: steps/s of a job type at a scale factor on a GPU type.

One reader serves Gavel's ``simulation_throughputs.json`` and the project's own
``optsched/data/throughputs.json`` (same shape)::

    {gpu_type: {"('Model name', scale_factor)": {"null": steps_per_s,
                                                 "('Other', s)": [t_self, t_other], ...}}}

Keys are Python-tuple strings; ``"null"`` is the job alone; pair keys are
space-sharing throughputs ``[t_self, t_other]`` when packed with that job type
(``pairs``; `simulate --packing` uses them). GPU types
whose name ends in ``_unconsolidated`` (Gavel: spread placement) are kept apart
in ``unconsolidated`` and not offered as cluster types.

Scale factors beyond the measured ones (Gavel's msr-seed0 traces go up to 64,
the table stops at 8; Philly jobs use up to hundreds): we extrapolate linearly
from the largest measured scale factor s0 <= s of that model on that type,
``thr(s) = thr(s0) · s / s0`` — i.e. we assume perfect weak scaling beyond the
measurements. This is optimistic for large jobs; it is documented in the
summary (``extrapolated_jobs``) so a reader knows how many jobs it touches.
"""

from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from optsched.model import DuplicateKeyError, OptschedError, loads_unique


@dataclass(frozen=True)
class ThroughputTable:
    # (model, scale_factor) -> {gpu_type: steps/s}
    alone: dict[tuple[str, int], dict[str, float]]
    gpu_types: tuple[str, ...]
    source: str = ""
    unconsolidated: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)
    # (job type a, job type b) -> {gpu_type: (t_a, t_b)} steps/s of each when packed together
    pairs: dict[tuple[tuple[str, int], tuple[str, int]], dict[str, tuple[float, float]]] = field(default_factory=dict)

    def pair(self, a: tuple[str, int], b: tuple[str, int]) -> dict[str, tuple[float, float]]:
        """Packed throughputs of job types a and b per GPU type ({} when not measured)."""
        got = self.pairs.get((a, b))
        if got is not None:
            return got
        rev = self.pairs.get((b, a))
        return {t: (y, x) for t, (x, y) in rev.items()} if rev else {}

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(sorted({m for m, _ in self.alone}))

    def scale_factors(self, model: str) -> tuple[int, ...]:
        return tuple(sorted(s for m, s in self.alone if m == model))

    def has_model(self, model: str) -> bool:
        return any(m == model for m, _ in self.alone)

    def lookup(self, model: str, scale_factor: int) -> tuple[dict[str, float], bool]:
        """Steps/s per GPU type for (model, scale_factor), and whether it was
        extrapolated beyond the measured scale factors (see module docstring)."""
        key = (model, int(scale_factor))
        if key in self.alone:
            return self.alone[key], False
        measured = [s for s in self.scale_factors(model) if s <= scale_factor]
        if not measured:
            raise KeyError(model)
        s0 = max(measured)
        return {t: v * scale_factor / s0 for t, v in self.alone[(model, s0)].items()}, True

    def matrix(self, models, scale_factors, gpu_types) -> tuple[np.ndarray, np.ndarray]:
        """T[m, j] for arrays of models and scale factors; also a mask of
        extrapolated rows. Unknown models raise KeyError(model)."""
        cache: dict[tuple[str, int], tuple[np.ndarray, bool]] = {}
        T = np.zeros((len(models), len(gpu_types)))
        extra = np.zeros(len(models), dtype=bool)
        for i, (m, s) in enumerate(zip(models, scale_factors)):
            key = (m, int(s))
            if key not in cache:
                row, ex = self.lookup(m, int(s))
                cache[key] = (np.array([row.get(t, 0.0) for t in gpu_types]), ex)
            T[i], extra[i] = cache[key]
        return T, extra


def reference_rates(table: ThroughputTable, models, scale_factors, reference: str = "v100") -> tuple[np.ndarray, str]:
    """Steps/s of each job alone on the reference GPU type (``reference``, else the
    table's last type), and that type: a generated job's duration is its runtime
    there (steps = duration × rate), and a converted job's duration is read back
    the same way (duration = steps / rate). Unknown models raise KeyError(model)."""
    if reference not in table.gpu_types:
        reference = table.gpu_types[-1]
    T, _ = table.matrix(models, scale_factors, (reference,))
    return T[:, 0], reference


def with_durations(trace, table: ThroughputTable, reference: str = "v100"):
    """``trace`` with a duration for every job that has total steps but no duration:
    its runtime alone on the reference type (:func:`reference_rates`). A job type the
    table lacks, or one that cannot run on that type, is one OptschedError naming its row."""
    from dataclasses import replace

    j = trace.jobs
    need = (j["duration"].isna() & np.isfinite(j["steps_total"])).to_numpy()
    if not need.any():
        return trace
    where = f"{trace.format} trace {trace.source}".strip()
    models, scales, rows = (j[c].to_numpy()[need] for c in ("model", "scale_factor", "row"))
    try:
        rate, reference = reference_rates(table, models, scales, reference)
    except KeyError as e:
        i = int(np.flatnonzero(models == e.args[0])[0])
        raise OptschedError(f"{where}: row {rows[i]}: job type {e.args[0]!r} is not in the throughput table "
                            f"{table.source}: pass --throughputs with a table that has it") from None
    if not (rate > 0).all():
        i = int(np.argmax(~(rate > 0)))
        raise OptschedError(f"{where}: row {rows[i]}: job type {models[i]!r} at scale factor {scales[i]} has no "
                            f"throughput on {reference} in {table.source}, so no duration there")
    duration = j["duration"].to_numpy().copy()
    duration[need] = j["steps_total"].to_numpy()[need] / rate
    return replace(trace, jobs=j.assign(duration=duration),
                   notes=trace.notes + (f"durations = total steps / throughput on {reference} ({table.source})",))


def _parse_key(key: str, where: str) -> tuple[str, int]:
    try:
        model, s = ast.literal_eval(key)
        return str(model), int(s)
    except (ValueError, SyntaxError, TypeError):
        raise OptschedError(f"{where}: key {key!r} is not a ('model', scale_factor) tuple") from None


def parse_throughputs(data: dict, source: str = "") -> ThroughputTable:
    if not isinstance(data, dict) or not data:
        raise OptschedError(f"throughput table {source}: top level must be a non-empty object of GPU types")
    alone: dict[tuple[str, int], dict[str, float]] = {}
    uncons: dict[tuple[str, int], dict[str, float]] = {}
    pairs: dict = {}
    types = []
    for gpu_type, entries in data.items():
        target = uncons if gpu_type.endswith("_unconsolidated") else alone
        name = gpu_type.removesuffix("_unconsolidated")
        if target is alone:
            types.append(gpu_type)
        if not isinstance(entries, dict):
            raise OptschedError(f"throughput table {source}: [{gpu_type!r}] must be an object")
        for key, val in entries.items():
            where = f"throughput table {source}: [{gpu_type!r}][{key!r}]"
            job_type = _parse_key(key, where)
            x = val.get("null") if isinstance(val, dict) else val
            if not isinstance(x, (int, float)) or not np.isfinite(x) or x < 0:
                raise OptschedError(f"{where}: 'null' throughput must be a non-negative number, got {x!r}")
            target.setdefault(job_type, {})[name] = float(x)
            if target is alone and isinstance(val, dict):
                for other, rates in val.items():
                    if other == "null":
                        continue
                    if not (isinstance(rates, (list, tuple)) and len(rates) == 2
                            and all(isinstance(r, (int, float)) and np.isfinite(r) and r >= 0 for r in rates)):
                        raise OptschedError(f"{where}[{other!r}]: a pair throughput must be [t_self, t_other] >= 0, got {rates!r}")
                    pairs.setdefault((job_type, _parse_key(other, f"{where}[{other!r}]")), {})[name] = (
                        float(rates[0]), float(rates[1]))
    return ThroughputTable(alone=alone, gpu_types=tuple(sorted(types)), source=source, unconsolidated=uncons,
                           pairs=pairs)


def read_throughputs(path: str | os.PathLike) -> ThroughputTable:
    p = Path(path)
    try:
        data = loads_unique(p.read_text())
    except DuplicateKeyError as e:
        raise OptschedError(f"throughput table {p}: {e}") from None
    except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
        raise OptschedError(f"throughput table {p}: cannot be read ({e.strerror or type(e).__name__})") from None
    except json.JSONDecodeError as e:
        raise OptschedError(f"throughput table {p}: malformed JSON at line {e.lineno}: {e.msg}") from None
    return parse_throughputs(data, str(p))


def default_throughputs() -> ThroughputTable:
    """The project's own small table (optsched/data/throughputs.json; invented,
    plausible numbers — not measurements)."""
    text = resources.files("optsched").joinpath("data/throughputs.json").read_text()
    return parse_throughputs(json.loads(text), "optsched/data/throughputs.json")


def gavel_throughputs(peer_data: str | os.PathLike | None = None) -> ThroughputTable:
    """Gavel's measured table from the peer data folder."""
    root = Path(peer_data or os.environ.get("OPTSCHED_PEER_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    return read_throughputs(root / "gavel" / "simulation_throughputs.json")
