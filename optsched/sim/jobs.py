"""Resolve a trace against a cluster: per-job throughput per GPU type and total
work, with clear errors (or a counted skip) for jobs that cannot run.

A job is rigid or elastic by its data: an elastic job names an application
with a goodput profile and has no length (``steps_total`` = inf: Pollux/Sia
workloads); it runs its application's epochs (optsched/sim/goodput_jobs.py).
Its throughput row for the policy comes from its profile; ``steps_total`` is
the statistical progress of all its epochs. A trace may mix both kinds.

Throughput comes from the trace's own durations (``speed="duration"``: the
same speed on every type) or from a throughput table (job type, scale factor →
steps/s per type; see traces/throughputs.py for scale factors beyond the
table). A job needs ``scale_factor`` GPUs of one type it has a positive
throughput on; if no type qualifies the job can never run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optsched.model import Cluster, OptschedError


@dataclass(frozen=True)
class JobArrays:
    """Per-job constants for the simulation, aligned with ``trace.jobs`` rows kept."""

    job_ids: tuple[str, ...]
    models: np.ndarray  # (n,) object
    arrival: np.ndarray  # (n,)
    scale_factor: np.ndarray  # (n,) float
    weight: np.ndarray  # (n,)
    throughput: np.ndarray  # (n, k) steps/s at the job's scale factor (0: cannot run there)
    steps_total: np.ndarray  # (n,)
    failed: np.ndarray  # (n,) bool
    rows: np.ndarray  # (n,) source line numbers
    gpu_types: tuple[str, ...]
    skipped: int = 0
    extrapolated: int = 0
    # Elastic jobs: is_elastic (n,) bool; apps[m] the Application (None for rigid
    # jobs); batch_size (n,) the workload's batch size (nan for rigid jobs).
    is_elastic: np.ndarray | None = None
    apps: tuple = ()
    batch_size: np.ndarray | None = None
    # Space sharing: job_type[m] = (model, scale factor) and the table of pair
    # throughputs (None: no packing data).
    job_type: tuple = ()
    pair_table: object = None
    # Spread placement (Gavel's ``*_unconsolidated`` rates): steps/s at the job's
    # scale factor when its GPUs span more than one server (n, k); None when the
    # table has no such rates or no job is multi-GPU (then a spread job runs at
    # its consolidated rate).
    spread_throughput: np.ndarray | None = None

    @property
    def any_elastic(self) -> bool:
        return self.is_elastic is not None and bool(self.is_elastic.any())

    @property
    def n(self) -> int:
        return len(self.job_ids)


def elastic_rows(trace) -> np.ndarray:
    """Which jobs of a trace are elastic: no length (steps_total = inf)."""
    steps = trace.jobs["steps_total"].to_numpy(dtype=float)
    return np.isinf(steps) if trace.speed != "goodput" else np.ones(len(steps), dtype=bool)


def _check_rates(rate: np.ndarray, rows: np.ndarray, where: str) -> None:
    """A duration trace's rate (steps / duration) in the snapshot's range: outside it the
    arithmetic underflows or overflows (1e-300 steps over 1e10 s finished in 1 s)."""
    from optsched.model import MAX_THROUGHPUT, MIN_THROUGHPUT

    bad = ~((rate >= MIN_THROUGHPUT) & (rate <= MAX_THROUGHPUT))
    if bad.any():
        i = int(np.argmax(bad))
        raise OptschedError(f"{where}: row {rows[i]}: iterations / duration = {rate[i]:.3g} steps/s, outside "
                            f"{MIN_THROUGHPUT:g} to {MAX_THROUGHPUT:g} steps/s")


def check_applications(jobs, elastic: np.ndarray, known, where: str, listed: str) -> None:
    """The first elastic row whose application is not in ``known``: one line naming the row, the
    application and ``listed`` (the applications there are)."""
    names = jobs["model"].to_numpy(dtype=object)
    unknown = elastic & ~np.isin(names.astype(str), list(known))
    if unknown.any():
        i = int(np.argmax(unknown))
        raise OptschedError(f"{where}: row {jobs['row'].iat[i]}: no goodput profile for application {names[i]!r} "
                            f"({listed})")


def resolve_jobs(trace, cluster: Cluster, table=None, seed: int = 0, skip_unrunnable: bool = False,
                 apps: dict | None = None, co_adapt: bool = False, pair_table=None,
                 spread_rates: bool = False) -> JobArrays:
    """``apps``: the profiled applications elastic jobs name (needed when the
    trace has any); ``co_adapt``: the policy chooses elastic jobs' sizes (pollux,
    sia) — their rows are then per GPU and their scale factor 1; ``pair_table``:
    a ThroughputTable whose pair throughputs packing uses; ``spread_rates``:
    multi-GPU rigid jobs whose GPUs span servers run at the table's
    ``*_unconsolidated`` rate (Gavel's simulator; the policy still sees the
    consolidated rate)."""
    types = tuple(sorted(cluster.gpus))
    cap = np.array([cluster.gpus[t] for t in types], dtype=float)
    where = f"{trace.format} trace {trace.source}".strip()
    elastic = elastic_rows(trace)
    trace, rates = _rigid_rates(trace, types, elastic, table, seed, spread_rates, where)
    j, T, steps = trace.jobs, rates.throughput, rates.steps
    sf = j["scale_factor"].to_numpy(dtype=float)
    app_of: list = [None] * len(j)
    batch = np.full(len(j), np.nan)
    if elastic.any():
        app_of, batch = _elastic_rates(j, elastic, apps, cluster, types, co_adapt, T, steps, where)
        if co_adapt:
            sf = np.where(elastic, 1.0, sf)
    keep, T = _runnable(j, cluster, cap, sf, T, steps, skip_unrunnable, where)
    spread = rates.spread
    return JobArrays(
        job_ids=tuple(j["job_id"].to_numpy()[keep]),
        models=j["model"].to_numpy(dtype=object)[keep],
        arrival=j["arrival_time"].to_numpy(dtype=float)[keep],
        scale_factor=sf[keep],
        weight=j["weight"].to_numpy(dtype=float)[keep],
        throughput=T[keep],
        steps_total=steps[keep],
        failed=j["failed"].to_numpy(dtype=bool)[keep],
        rows=j["row"].to_numpy()[keep],
        gpu_types=types,
        skipped=int((~keep).sum()) + trace.skipped,
        extrapolated=rates.extrapolated,
        is_elastic=elastic[keep],
        apps=tuple(a for a, k in zip(app_of, keep) if k),
        batch_size=batch[keep],
        job_type=tuple((str(m), int(s)) for m, s in zip(j["model"].to_numpy()[keep], sf[keep])),
        pair_table=pair_table,
        spread_throughput=spread[keep] if spread is not None else None,
    )


@dataclass(frozen=True)
class _Rates:
    """Rigid jobs' steps/s per type and total steps (elastic rows: zeros, filled later)."""
    throughput: np.ndarray
    steps: np.ndarray
    extrapolated: int = 0
    spread: np.ndarray | None = None


def _rigid_rates(trace, types, elastic, table, seed: int, spread_rates: bool, where: str):
    """(trace, _Rates): from each job's duration (a duration trace, the same rate on
    every type) or from the throughput table by model and scale factor (a Philly
    trace without models gets them assigned first, hence the trace returned)."""
    from optsched.traces.throughputs import default_throughputs

    j = trace.jobs
    if elastic.all():
        return trace, _Rates(np.zeros((len(j), len(types))), np.zeros(len(j)))
    if trace.speed == "duration":
        dur = j["duration"].to_numpy(dtype=float)
        steps = j["steps_total"].to_numpy(dtype=float)
        steps = np.where(np.isnan(steps), dur, steps)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            rate = steps / dur  # (a zero or tiny duration is out of range below, not floored)
        _check_rates(rate[~elastic], j["row"].to_numpy()[~elastic], where)
        return trace, _Rates(np.repeat(rate[:, None], len(types), axis=1), steps)
    table = table or default_throughputs()
    if trace.format == "philly" and (j["model"] == "").any():
        from optsched.traces.philly import assign_models

        trace = assign_models(trace, table, seed)
        j = trace.jobs
    sf = j["scale_factor"].to_numpy(dtype=float)
    models = j["model"].to_numpy(dtype=object)
    check_job_types(j, elastic, table, where)
    T = np.zeros((len(j), len(types)))
    extra = np.zeros(len(j), dtype=bool)
    if (~elastic).any():
        T[~elastic], extra[~elastic] = table.matrix(models[~elastic], sf[~elastic].astype(int), types)
    spread = _spread_matrix(table, models, sf, elastic, types, T) if spread_rates else None
    steps = j["steps_total"].to_numpy(dtype=float).copy()
    need = np.isnan(steps)
    if need.any():
        ref = types.index("v100") if "v100" in types else int(np.argmax(T.sum(axis=0)))
        steps[need] = j["duration"].to_numpy(dtype=float)[need] * T[need, ref]
    return trace, _Rates(T, steps, int(extra.sum()), spread)


def check_job_types(j, elastic, table, where: str) -> None:
    """Every rigid row's job type is in ``table`` (else one line naming the first row that is not)."""
    models = j["model"].to_numpy(dtype=object)
    known = {m: table.has_model(m) for m in set(models[~elastic])}
    unknown = np.array([not e and not known[m] for m, e in zip(models, elastic)])
    if unknown.any():
        i = int(np.argmax(unknown))
        raise OptschedError(
            f"{where}: row {j['row'].iat[i]}: unknown job type {models[i]!r} (not in throughput table "
            f"{table.source or 'given'}; --throughputs names the table of the trace's job types)"
        )


def _elastic_rates(j, elastic, apps, cluster: Cluster, types, co_adapt: bool, T, steps, where: str):
    """Fill elastic rows of ``T`` and ``steps`` (in place) from their applications'
    profiles; (application per row, batch size per row)."""
    from optsched.sim.goodput_jobs import throughput_row

    if apps is None:
        raise OptschedError(f"{where}: elastic jobs need application profiles (apps=...)")
    check_applications(j, elastic, apps, where, f"profiled: {', '.join(sorted(apps)) or 'none'}")
    if "batch_size" not in j:
        raise OptschedError(f"{where}: elastic jobs need a batch_size column")
    names = j["model"].to_numpy(dtype=object)
    sf = j["scale_factor"].to_numpy(dtype=float)
    cap = np.array([cluster.gpus[t] for t in types], dtype=float)
    app_of: list = [None] * len(j)
    batch = np.full(len(j), np.nan)
    batch[elastic] = j["batch_size"].to_numpy(dtype=float)[elastic]
    server = server_gpus(cluster, types)
    for m in np.flatnonzero(elastic):
        app_of[m] = app = apps[names[m]]
        T[m] = throughput_row(app, batch[m], int(sf[m]), types, cap, server, co_adapt)
        steps[m] = app.total_progress
    return app_of, batch


def _runnable(j, cluster: Cluster, cap, sf, T, steps, skip_unrunnable: bool, where: str):
    """(rows kept, T with types narrower than a job zeroed): a job that can never run
    is an error naming why, or dropped with ``skip_unrunnable``."""
    rated = (T > 0).any(axis=1)  # some type of the cluster has a throughput for it at all
    T = np.where(sf[:, None] > cap[None, :], 0.0, T)
    runnable = (T > 0).any(axis=1) & (steps > 0)
    if runnable.all() or skip_unrunnable:
        return runnable, T
    i = int(np.flatnonzero(~runnable)[0])
    types = ", ".join(f"{c} {t}" for t, c in cluster.gpus.items())
    why = (
        "has no work (0 steps)" if steps[i] <= 0
        else f"needs {int(sf[i])} GPUs of one type; the cluster has {types}" if sf[i] > cap.max()
        else f"it has no throughput on any GPU type of the cluster ({types})" if not rated[i]
        else f"needs {int(sf[i])} GPUs of one type it runs on; the cluster has {types}"
    )
    raise OptschedError(
        f"{where}: row {j['row'].iat[i]}: job {j['job_id'].iat[i]!r} can never run: {why} "
        f"({int((~runnable).sum())} such job(s); --skip-unrunnable drops them and counts them in the summary)"
    )


def _spread_matrix(table, models, sf, elastic, types, T) -> np.ndarray | None:
    """Steps/s of each rigid multi-GPU job when spread over servers: the table's
    ``*_unconsolidated`` entry for (model, scale factor) on that type, else its
    consolidated rate (scale factors beyond the table: the largest measured
    spread/consolidated ratio of that model). None when nothing differs."""
    uncons = getattr(table, "unconsolidated", None)
    multi = (~elastic) & (sf > 1)
    if not uncons or not multi.any():
        return None
    out = T.copy()
    cache: dict = {}
    for i in np.flatnonzero(multi).tolist():
        key = (models[i], int(sf[i]))
        if key not in cache:
            ratio = np.ones(len(types))
            measured = [s for (m, s) in uncons if m == key[0] and s <= key[1]]
            if measured:
                s0 = max(measured)
                row, base = uncons[(key[0], s0)], table.alone.get((key[0], s0), {})
                for c, t in enumerate(types):
                    if t in row and base.get(t, 0) > 0:
                        ratio[c] = min(row[t] / base[t], 1.0) if s0 != key[1] else row[t] / base[t]
            cache[key] = ratio
        out[i] = T[i] * cache[key]
    return out if not np.array_equal(out, T) else None


def server_gpus(cluster: Cluster, types) -> np.ndarray:
    """GPUs per server of each type: the cluster's servers, else Sia's node size
    for Sia's types, else 4 (Pollux's nodes)."""
    from optsched.goodput.profiles import SIA_GPU_TYPES

    out = []
    for t in types:
        sizes = [s.gpus for s in (cluster.servers or []) if s.gpu_type == t]
        out.append(max(sizes) if sizes else SIA_GPU_TYPES.get(t, 4))
    return np.array(out, dtype=int)


def with_servers(cluster: Cluster) -> Cluster:
    """The cluster with explicit servers (server_gpus per type) when it lists none."""
    from optsched.model import Server

    if cluster.servers:
        return cluster
    types = tuple(sorted(cluster.gpus))
    per = dict(zip(types, server_gpus(cluster, types)))
    servers = []
    for t in cluster.gpus:
        count, p = int(cluster.gpus[t]), int(per[t])
        full, rest = divmod(count, p)
        servers += [Server(id=f"{t}-{i}", gpu_type=t, gpus=p) for i in range(full)]
        if rest:
            servers.append(Server(id=f"{t}-{full}", gpu_type=t, gpus=rest))
    return cluster.model_copy(update={"servers": servers})


def parse_cluster(spec: str | None = None, servers: str | None = None, prices: str | None = None) -> Cluster:
    """``v100=36,p100=36,k80=36`` and/or ``16x4`` (servers × GPUs per server,
    homogeneous; the type is the single --cluster type, else ``gpu``); ``prices``:
    ``v100=2.48,k80=0.45`` $/GPU-hour (the cost-aware policies need one per type)."""
    cluster = _parse_cluster(spec, servers)
    return with_prices(cluster, parse_prices(prices)) if prices else cluster


def parse_prices(text: str) -> dict[str, float]:
    """``v100=2.48,k80=0.45`` as {type: $/GPU-hour}; one line naming --prices when it is not that."""
    price: dict[str, float] = {}
    for part in text.split(","):
        name, eq, value = part.partition("=")
        try:
            v = float(value)
        except ValueError:
            v = None
        if v is None or not eq or not name.strip():
            raise OptschedError(f"--prices: {part!r} is not TYPE=$/GPU-hour (e.g. v100=2.48,k80=0.45)")
        if name.strip() in price:
            raise OptschedError(f"--prices: {name.strip()} is given twice")
        price[name.strip()] = v
    return price


def with_prices(cluster: Cluster, price: dict[str, float]) -> Cluster:
    """``cluster`` priced by ``price`` (its types only; each 0 or in the model's range)."""
    from optsched.model import check_prices

    bad = check_prices(price, set(cluster.gpus))
    if bad:
        raise OptschedError(f"--prices{bad[0]}: {bad[1]}")
    return cluster.model_copy(update={"price_per_hour": price})


def _parse_cluster(spec: str | None, servers: str | None) -> Cluster:
    from optsched.model import MAX_GPUS, Server

    gpus: dict[str, int] = {}
    if spec:
        for part in spec.split(","):
            name, eq, count = part.partition("=")
            if servers and not eq and name.strip() and "," not in spec:
                gpus[name.strip()] = 0  # the type of --servers' GPUs; the count is the servers'
                continue
            if not eq or not name.strip():
                raise OptschedError(f"--cluster: {part!r} is not TYPE=COUNT (e.g. v100=36,p100=36,k80=36; "
                                    "a type alone names the GPUs of --servers)")
            try:
                c = int(count)
            except ValueError:
                raise OptschedError(f"--cluster: count {count!r} for {name.strip()!r} is not an integer") from None
            if c <= 0:
                raise OptschedError(f"--cluster: count for {name.strip()!r} must be positive, got {c}")
            if name.strip() in gpus:  # (the last count won, silently)
                raise OptschedError(f"--cluster: {name.strip()} is given twice")
            gpus[name.strip()] = c
    if servers:
        try:
            ns, _, per = servers.lower().partition("x")
            ns, per = int(ns), int(per)
        except ValueError:
            raise OptschedError(f"--servers: {servers!r} is not SERVERSxGPUS (e.g. 16x4)") from None
        if ns <= 0 or per <= 0:
            raise OptschedError(f"--servers: {servers!r} needs positive numbers")
        if ns * per > MAX_GPUS:  # before any server is built
            raise OptschedError(f"--servers: {ns:,} x {per:,} GPUs exceed the limit of {MAX_GPUS:,}")
        if len(gpus) > 1:
            raise OptschedError("--servers describes a homogeneous cluster; give at most one type in --cluster")
        t = next(iter(gpus), "gpu")  # (--cluster names the type here: the count is the servers')
        if gpus and gpus[t] not in (0, ns * per):  # (the count was silently replaced by the servers')
            raise OptschedError(f"--cluster: {t}={gpus[t]} disagrees with --servers {servers} ({ns * per:,} GPUs); "
                                f"give --cluster {t} or {t}={ns * per}")
        return Cluster(gpus={t: ns * per}, servers=[Server(id=f"{t}-{i}", gpu_type=t, gpus=per) for i in range(ns)])
    if not gpus:
        raise OptschedError("--cluster: empty cluster")
    return Cluster(gpus=gpus)
