"""What a sweep is: the cross product trace × cluster × policy × load × seed,
each run a canonical configuration with a stable id.

A sweep comes from flags or from a sweep file (TOML, YAML or JSON) with the
same keys::

    trace = "../shared/data/philly/philly.csv.gz"   # a path, or "gavel" / "bursty" (generated)
    policies = ["max_min_fairness", "fifo", "las"]
    loads = [0.5, 1, 2]
    seeds = [0, 1]
    clusters = ["v100=8,p100=8,k80=8"]             # or cluster = "..."
    [trace_options]   # jobs, skip, sample, format, philly_cluster, multi_gpu, throughputs, length_scale
    jobs = 200
    [options]         # keywords of optsched.simulate (round_length, admission, ...)
    round_length = 360
    [auto]            # policy "auto": candidates, every, horizon, metric, jct_weight
    candidates = ["max_min_fairness", "fifo", "las"]

**Load.** For a generated trace (``gavel``, ``bursty``) the load is the arrival
rate in jobs per hour passed to the generator. For a real trace (Philly,
Gavel/Tiresias files, Pollux/Sia workloads) the inter-arrival times are scaled
by 1/load: arrival' = arrival / load (load 2 = twice the arrival rate, the
same jobs).

A run's id is the first 16 hex digits of the SHA-256 of its canonical JSON
configuration (sorted keys): the same configuration always lands in the same
``DIR/runs/<id>/``, which is what makes a sweep resumable.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from optsched.model import DuplicateKeyError, OptschedError, loads_unique

GENERATORS = ("gavel", "bursty")
TRACE_OPTIONS = ("jobs", "skip", "sample", "format", "philly_cluster", "multi_gpu", "throughputs", "length_scale",
                 "burst_factor",
                 "burst_hours", "burst_every_hours", "burst_short")
AUTO_KEYS = ("candidates", "every", "horizon", "metric", "jct_weight", "parallel")
AUTO_METRICS = ("jct", "responsiveness", "mix")
EXECUTORS = ("local", "ray", "serial")
SPEC_KEYS = ("trace", "policies", "loads", "seeds", "clusters", "cluster", "prices", "trace_options", "options",
             "auto", "executor", "workers", "address")


@dataclass
class SweepSpec:
    trace: str
    policies: list[str]
    loads: list[float] = field(default_factory=lambda: [1.0])
    seeds: list[int] = field(default_factory=lambda: [0])
    clusters: list[str | None] = field(default_factory=lambda: [None])
    prices: str | None = None  # $/GPU-hour by type (v100=2.48,k80=0.45), for every cluster that has the type
    trace_options: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    auto: dict = field(default_factory=dict)
    executor: str = "local"
    workers: int | None = None
    address: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def runs(self) -> list[dict]:
        """Every run's canonical configuration (with its ``run_id``), in sweep order."""
        out = []
        trace = trace_identity(self.trace)
        for cluster in self.clusters:
            for policy in self.policies:
                for load in self.loads:
                    for seed in self.seeds:
                        cfg = {"trace": trace, "trace_options": dict(self.trace_options), "cluster": cluster,
                               "policy": policy, "load": float(load), "seed": int(seed), "options": dict(self.options)}
                        if policy == "auto":
                            cfg["auto"] = auto_config(self.auto, self.policies)
                        if self.prices and PRICED & set(cfg["auto"]["candidates"] if policy == "auto" else [policy]):
                            # (only where a policy reads them, in one spelling: other runs keep their ids)
                            cfg["prices"] = _normal_prices(self.prices)
                        cfg["run_id"] = run_id(cfg)
                        out.append(cfg)
        return out


def trace_identity(trace: str) -> str:
    """Generators by name; files by absolute path (so a sweep re-run from another
    directory finds the same run ids only if it names the same file)."""
    return trace if trace in GENERATORS else str(Path(trace).expanduser().resolve())


def auto_config(auto: dict, policies: list[str]) -> dict:
    cands = auto.get("candidates") or [p for p in policies if p != "auto"]
    return {"candidates": list(cands), "every": int(auto.get("every", 10)), "horizon": auto.get("horizon"),
            "metric": auto.get("metric", "jct"), "jct_weight": float(auto.get("jct_weight", 0.5))}


def run_id(cfg: dict) -> str:
    body = {k: v for k, v in cfg.items() if k != "run_id"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# The types of [trace_options] values: whole numbers (with their least value), positive numbers,
# flags and text. A sweep file's value of another type is refused naming its key ("5" for 5 was
# converted silently, sample = -3 was a ValueError traceback).
TRACE_OPTION_WHOLE = {"jobs": 1, "skip": 0, "sample": 1}
TRACE_OPTION_POSITIVE = ("length_scale", "burst_factor", "burst_hours", "burst_every_hours")
TRACE_OPTION_FLAGS = ("multi_gpu", "burst_short")
TRACE_OPTION_TEXT = ("format", "philly_cluster", "throughputs")


def check_trace_options(options: dict) -> dict:
    """``options`` with each known value checked for its type and range (unknown keys are
    left to ``validate``, which names the choices); one line naming ``trace_options.KEY``."""
    from optsched.checks import check_flag, check_number

    out = dict(options)
    for key, value in options.items():
        name = f"trace_options.{key}"
        if key in TRACE_OPTION_WHOLE:
            out[key] = check_number(name, value, TRACE_OPTION_WHOLE[key], whole=True)
        elif key in TRACE_OPTION_POSITIVE:
            out[key] = check_number(name, value, 0.0, lo_open=True)
        elif key in TRACE_OPTION_FLAGS:
            out[key] = check_flag(name, value)
        elif key in TRACE_OPTION_TEXT and not isinstance(value, str):
            raise OptschedError(f"{name}: must be text (a string), got {value!r}")
    return out


def _numbers(value, name: str, whole: bool) -> list:
    """A sweep's list of loads or seeds as given in a file or by Python: numbers only (a
    string, a bool or 1.5 for a seed is refused, naming ``name[i]``); one number is a list of one."""
    from optsched.checks import check_number

    if value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    return [check_number(f"{name}[{i}]" if isinstance(value, (list, tuple)) else name, v, whole=whole)
            for i, v in enumerate(items)]


def _as_list(value, name: str, cast) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    elif not isinstance(value, (list, tuple)):
        value = [value]
    out = []
    for v in value:
        try:
            out.append(cast(v.strip() if isinstance(v, str) else v))
        except (TypeError, ValueError):
            raise OptschedError(f"--{name}: {v!r} is not a valid {cast.__name__}") from None
    return out


def spec_from_dict(d: dict, where: str = "sweep") -> SweepSpec:
    unknown = sorted(set(d) - set(SPEC_KEYS))
    if unknown:
        raise OptschedError(f"{where}: unknown key {unknown[0]!r} (choose from {', '.join(SPEC_KEYS)})")
    if not d.get("trace"):
        raise OptschedError(f"{where}: no trace (a path, or one of the generators {', '.join(GENERATORS)})")
    if d.get("clusters") is not None and d.get("cluster") is not None:  # (one was silently ignored)
        raise OptschedError(f"{where}: give cluster or clusters, not both")
    clusters = d.get("clusters", d.get("cluster"))
    if isinstance(clusters, str):  # one cluster (its commas separate types, not clusters)
        clusters = [clusters]
    elif isinstance(clusters, (list, tuple)):  # sweep.json records "clusters": [null] for the default
        clusters = [None if c is None else str(c).strip() for c in clusters]
    else:
        clusters = _as_list(clusters, "cluster", str)
    spec = SweepSpec(
        trace=str(d["trace"]),
        policies=_as_list(d.get("policies"), "policies", str),
        loads=_numbers(d.get("loads"), "loads", whole=False) or [1.0],
        seeds=_numbers(d.get("seeds"), "seeds", whole=True) or [0],
        clusters=clusters or [None],
        prices=_prices(d.get("prices")),
        trace_options=check_trace_options(table_of(d, "trace_options", where)),
        options=table_of(d, "options", where),
        auto=table_of(d, "auto", where),
        executor=str(d.get("executor", "local")),
        workers=_workers(d.get("workers"), where),
        address=d.get("address"),
    )
    return spec


TABLE_KEYS = ("trace_options", "options", "auto")


def table_of(d: dict, key: str, where: str) -> dict:
    """A sweep file's table (``[options]``, ``[trace_options]``, ``[auto]``); absent is empty."""
    value = d.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OptschedError(f"{where}: {key} must be a table of KEY = VALUE, got {value!r}")
    return dict(value)


def _workers(value, where: str) -> int | None:
    if value is None:
        return None
    from optsched.checks import check_number

    try:
        return check_number("workers", value, 1, whole=True)
    except OptschedError as e:
        raise OptschedError(f"{where}: {e}") from None


PRICED = {"min_cost", "min_cost_slo"}  # the policies that read GPU prices


def _normal_prices(prices: str) -> str:
    """One spelling of a price list (types sorted, numbers as floats), so a reordered list is the same run."""
    from optsched.sim.jobs import parse_prices

    return ",".join(f"{t}={v!r}" for t, v in sorted(parse_prices(prices).items()))


def _prices(value) -> str | None:
    """``v100=2.48,k80=0.45``, or a sweep file's table ``{v100 = 2.48, k80 = 0.45}``."""
    if value is None or value == "":
        return None
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if not isinstance(value, str):
        raise OptschedError(f"--prices: expected TYPE=$/GPU-hour pairs (e.g. v100=2.48,k80=0.45), got {value!r}")
    return value.strip()


def _yaml_unique(text: str):
    """yaml.safe_load, refusing a mapping that repeats a key (PyYAML keeps the last, as JSON readers do)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise DuplicateKeyError(f"line {key_node.start_mark.line + 1}: key {key!r} appears twice in one mapping")
            seen.add(key)
        return loader.construct_mapping(node, deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return yaml.load(text, Loader=Loader)  # noqa: S506  (a SafeLoader subclass)


def read_spec_file(path: str | os.PathLike) -> dict:
    p = Path(path)
    if not p.exists():
        raise OptschedError(f"sweep file {p}: no such file")
    data = p.read_bytes()
    try:
        text = data.decode("utf-8-sig")  # (a byte-order mark, as some editors write, is not part of the text)
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise OptschedError(f"sweep file {p}: not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}); "
                            "save it as UTF-8") from None
    try:
        if p.suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        if p.suffix in (".yaml", ".yml"):
            try:
                d = _yaml_unique(text)
            except DuplicateKeyError as e:
                raise OptschedError(f"sweep file {p}: {e}") from None
            if not isinstance(d, dict):
                raise OptschedError(f"sweep file {p}: expected a mapping at the top level")
            return d
        if p.suffix == ".json":
            try:
                d = loads_unique(text)
            except DuplicateKeyError as e:
                raise OptschedError(f"sweep file {p}: {e}") from None
            return d.get("spec", d)  # DIR/sweep.json records {"spec": ..., ...}
    except OptschedError:
        raise
    except Exception as e:  # tomllib.TOMLDecodeError, yaml.YAMLError, json.JSONDecodeError
        raise OptschedError(f"sweep file {p}: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    raise OptschedError(f"sweep file {p}: unknown extension {p.suffix!r} (use .toml, .yaml, .yml or .json)")


def validate(spec: SweepSpec) -> None:
    """Everything that can be checked before any run starts: one line, naming the flag."""
    from optsched.policy import policy_names
    from optsched.sim.loop import SimConfig

    if not spec.policies:
        raise OptschedError("--policies: give at least one policy")
    known = [p for p in policy_names() if not p.startswith("_")]  # _auto_schedule is auto's own
    for p in spec.policies:
        if p != "auto" and p not in known:
            raise OptschedError(f"--policies: unknown policy {p!r} (choose from auto, {', '.join(known)})")
    for flag, values in (("--policies", spec.policies), ("--loads", spec.loads), ("--seeds", spec.seeds),
                         ("--cluster", spec.clusters)):
        dup = [v for v in values if values.count(v) > 1]  # (the same run twice: duplicated rows, one folder)
        if dup:
            raise OptschedError(f"{flag}: {dup[0]!r} is listed twice")
    for load in spec.loads:
        if not load > 0:
            raise OptschedError(f"--loads: must be positive, got {load:g}")
    if spec.executor not in EXECUTORS:
        raise OptschedError(f"--executor: unknown {spec.executor!r} (choose from {', '.join(EXECUTORS)})")
    if spec.workers is not None and spec.workers < 1:
        raise OptschedError(f"--workers: must be >= 1, got {spec.workers}")
    if spec.trace not in GENERATORS and not Path(spec.trace).expanduser().exists():
        raise OptschedError(f"trace {spec.trace}: no such file (or use a generator: {', '.join(GENERATORS)})")
    bad = sorted(set(spec.trace_options) - set(TRACE_OPTIONS))
    if bad:
        raise OptschedError(f"trace_options: unknown {bad[0]!r} (choose from {', '.join(TRACE_OPTIONS)})")
    fields = set(SimConfig.__dataclass_fields__) - {"policy", "seed"}
    bad = sorted(set(spec.options) - fields - {"throughputs"})
    if bad:
        raise OptschedError(f"options: unknown simulate option {bad[0]!r} (choose from {', '.join(sorted(fields))})")
    bad = sorted(set(spec.auto) - set(AUTO_KEYS))
    if bad:
        raise OptschedError(f"auto: unknown key {bad[0]!r} (choose from {', '.join(AUTO_KEYS)})")
    if "auto" in spec.policies:
        a = auto_config(spec.auto, spec.policies)
        if not a["candidates"]:
            raise OptschedError("--policies: auto needs candidates (other policies, or auto.candidates)")
        for p in a["candidates"]:
            if p not in known:
                raise OptschedError(f"auto.candidates: unknown policy {p!r}")
        if a["metric"] not in AUTO_METRICS:
            raise OptschedError(f"auto.metric: unknown {a['metric']!r} (choose from {', '.join(AUTO_METRICS)})")
        if a["every"] < 1:
            raise OptschedError(f"auto.every: must be >= 1 round, got {a['every']}")
    from optsched.sweep.traces import build_cluster, build_trace, throughput_table

    for c in spec.clusters:
        try:
            build_cluster(c)  # a shape 16x4 too, as the runs read it
        except OptschedError as e:
            raise OptschedError(f"--cluster {c!r}: {_without_flag(str(e))}") from None
    # Build the first trace and check every run's options against it, as the runs will read them.
    trace = build_trace(spec.trace, spec.trace_options, spec.loads[0], spec.seeds[0])
    _check_prices(spec, trace)
    table = throughput_table(spec.trace_options, spec.options)
    from optsched.sim.jobs import elastic_rows

    elastic = bool(elastic_rows(trace).any())
    _check_job_types(trace, table)
    for policy in _run_policies(spec):
        _check_run_options(spec, policy, trace, table, elastic)
    check_sweep_rounds(spec, trace, table)


def _check_job_types(trace, table) -> None:
    """A job type the table lacks fails every run alike: refused once, before them."""
    from optsched.sim.jobs import check_job_types, elastic_rows

    if trace.speed == "duration" or (trace.format == "philly" and (trace.jobs["model"] == "").any()):
        return  # rates from durations, or job types the runs assign from the table
    from optsched.traces.throughputs import default_throughputs

    try:
        check_job_types(trace.jobs, elastic_rows(trace), table or default_throughputs(),
                        f"{trace.format} trace {trace.source}".strip())
    except OptschedError as e:
        raise OptschedError(str(e).replace("--throughputs", "trace_options.throughputs")) from None


def _check_prices(spec: SweepSpec, trace) -> None:
    """Every cluster's prices parse, and every priced type is in some cluster (a typo is not ignored)."""
    from optsched.sim.jobs import parse_cluster
    from optsched.sweep.traces import build_cluster, cluster_types

    priced = set(_run_policies(spec)) & PRICED
    types = {c: cluster_types(c, trace) for c in spec.clusters}
    if spec.prices:  # names a type that no cluster has (a typo is not dropped as "not in this cluster")
        parse_cluster(",".join(f"{t}=1" for t in sorted(set().union(*types.values()))), prices=spec.prices)
    for c, mine in types.items():
        got = build_cluster(c, spec.prices, trace) if spec.prices else None
        missing = [t for t in mine if got is None or t not in (got.price_per_hour or {})]
        if priced and missing:  # (each run would fail in its first round)
            raise OptschedError(f"--prices: {sorted(priced)[0]} needs a price for every GPU type; "
                                f"{missing[0]!r} of cluster {c or 'default'!r} has none (e.g. --prices v100=2.48,k80=0.45)")


def _check_run_options(spec: SweepSpec, policy: str, trace, table, elastic: bool) -> None:
    """A run's simulate options as the runs read them (SimConfig.validate, check_run) and its policy
    options on a toy instance, before the first run: a bad --set value failed each run with a TypeError.
    Messages name this sweep's --set keys (and --policies), not simulate's flags."""
    from optsched.policy_options import _dry_run
    from optsched.sim import check_run
    from optsched.sim.limits import keyword_names
    from optsched.sim.loop import SimConfig

    opts = {k: v for k, v in spec.options.items() if k != "throughputs"}
    if isinstance(opts.get("window"), list):
        opts["window"] = tuple(opts["window"])
    try:
        cfg = SimConfig(policy=policy, seed=spec.seeds[0], **opts)  # (validate refused keys it does not have)
        cfg.validate(elastic)
        cfg.check_policy_option_keys()
        if cfg.policy_options:
            _dry_run(policy, cfg.policy_options, {k: repr(v) for k, v in cfg.policy_options.items()})
        check_run(trace, policy, cfg.solver, cfg.packing, table, cfg.allocator_options, cfg.placement)
    except OptschedError as e:
        msg = str(e)
        raise OptschedError("--policies" + msg[len("--policy"):] if msg.startswith("--policy:")
                            else keyword_names(msg, _run_set_name)) from None


def _run_policies(spec: SweepSpec) -> list[str]:
    """Every policy some run solves: the sweep's, with auto's candidates in place of auto."""
    cands = auto_config(spec.auto, spec.policies)["candidates"]
    return list(dict.fromkeys(q for p in spec.policies for q in (cands if p == "auto" else [p])))


def _run_set_name(key: str) -> str:
    """A simulate keyword as this sweep's option: --set KEY (allocator_options['queue'] stays whole)."""
    return key if key in ("cluster", "cluster prices") else f"--set {key}"


def _without_flag(msg: str) -> str:
    """'--cluster: count ...' -> 'count ...' (the caller names the flag and its value)."""
    flag, sep, rest = msg.partition(": ")
    return rest if sep and flag.startswith("--") and " " not in flag else msg


def _set_flag(key: str) -> str:
    """check_sim_options' name for a keyword (allocator options sit inside --set allocator_options={...})."""
    return _run_set_name(f"allocator_options['{key}']" if key in ("migration_cost", "hysteresis") else key)


def check_sweep_rounds(spec: SweepSpec, trace=None, table=None) -> None:
    """The rounds bound (optsched.sim.limits) on the sweep's first trace, for every cluster shape (job
    lengths do not depend on the load): a run over the bound is refused before any run starts."""
    from optsched.sim import DEFAULT_CLUSTER, DEFAULT_ELASTIC_SERVERS
    from optsched.sim.jobs import elastic_rows, parse_cluster
    from optsched.sim.limits import check_rounds
    from optsched.sweep.traces import build_cluster, build_trace, throughput_table

    if trace is None:
        trace = build_trace(spec.trace, spec.trace_options, spec.loads[0], spec.seeds[0])
        table = throughput_table(spec.trace_options, spec.options)
    for c in spec.clusters:
        cluster = build_cluster(c) or (parse_cluster(None, DEFAULT_ELASTIC_SERVERS) if elastic_rows(trace).all()
                                       else parse_cluster(DEFAULT_CLUSTER))
        check_rounds(trace, cluster, table, {**spec.options, "seed": spec.seeds[0]}, flag=_set_flag)
