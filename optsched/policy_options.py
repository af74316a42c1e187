"""``--policy-option KEY=VALUE`` (solve, simulate, compare): a formulation's
own options from the command line, parsed and validated before any work.

The keys a policy takes are the named parameters of its module's ``build`` /
``allocate`` (``optsched.policy``), less those the command line cannot give or
that the policy's name fixes:

- objects from the Python API (``predictor``, ``explain``, ``weights``), ``packing`` (the
  ``--packing`` flag) and the plumbing (``inst``, ``policy``, ``solver``,
  ``time_limit``);
- options the registry sets for the name (``order`` of ``fifo``, ``agnostic``
  of ``*_agnostic``, ``discretization`` of ``tiresias_gittins``, ...): another
  value would be another policy;
- options the module declares meaningful only under other fixed values
  (``OPTIONS_ONLY_FOR``: Tiresias's ``thresholds`` are not an option of ``fifo``).

A value is read by the type of the parameter's default: ``true/false`` (also
1/0, yes/no) for a flag, an integer, a finite number, comma-separated numbers
for a tuple (``thresholds=3600,7200``), text for text; a parameter without a
default value type takes a number or a flag (a flag when declared
``bool | None``, as pollux's ``agnostic``; lists and objects are the Python API's); ``prior`` takes the path of an existing file. A number whose default
is >= 0 (counts, seconds, factors) must be >= 0. The options then go
through one solve on a two-job instance, so a value the formulation refuses
(a negative count, an unknown name) is reported here, naming the key, rather
than rounds into a simulation. Errors are one line (OptschedError, exit 2).

The formulations check their own options with ``check_flag``,
``check_number`` and ``check_increasing`` (``optsched/checks.py``), so the Python API
(``optsched.solve(snap, "tiresias", thresholds=(-5, 10))``), the simulator and
the command line refuse the same values with one line that starts with the
option's name: ``thresholds: must be positive and increasing, got [-5, 10]``.
A flag is true/false (also 1/0), a number is finite and inside the option's
range, a count is a whole number. Bounds that depend on the instance (the
GPUs of a cluster) are not checked here: the dry run's two-job instance is
not the user's.
"""

from __future__ import annotations

import inspect
import json
import math

from optsched.model import OptschedError

API_ONLY = frozenset({"predictor", "explain", "packing", "weights"})
PATHS = frozenset({"prior"})  # a file (tiresias_gittins's GPU-time prior CSV)
FLAG = "--policy-option"


def accepted_options(policy: str) -> dict[str, object]:
    """{key: default} a policy takes from the command line."""
    from optsched.policy import PLUMBING, _module, entry_point

    mod, fixed = _module(policy)
    fn = entry_point(mod)
    only = getattr(mod, "OPTIONS_ONLY_FOR", {})  # {key: (fixed option, values it applies under)}
    out = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or p.name in PLUMBING | API_ONLY or p.name in fixed:
            continue
        if p.name in only and fixed.get(only[p.name][0]) not in only[p.name][1]:
            continue  # e.g. Tiresias's thresholds under fifo: ignored there, so not an option of fifo
        out[p.name] = None if p.default is inspect.Parameter.empty else p.default
    return out


def _declared(policy: str) -> dict[str, str]:
    """{key: annotation text} of the policy's parameters (``"bool | None"``)."""
    from optsched.policy import _module, entry_point

    mod, _ = _module(policy)
    return {p.name: p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
            for p in inspect.signature(entry_point(mod)).parameters.values()}


def _stand_in(default, annotation: str):
    """A flag's default for a flag whose default is None (pollux's ``agnostic: bool | None``), so that
    it reads true/false/1/0/yes/no as every other flag; other None defaults stay "a number or a flag"
    (the formulation checks the number: ``max_partners: must be a whole number``)."""
    if default is None and {k.strip() for k in (annotation or "").split("|")} - {"None"} == {"bool"}:
        return False
    return default


def _parse(key: str, text: str, default):
    bad = OptschedError(f"{FLAG}: {key}={text!r}: expected {_kind(default)}")
    t = text.strip()
    if key in PATHS:
        from pathlib import Path

        if not Path(t).is_file():
            raise OptschedError(f"{FLAG}: {key}={text!r}: no such file")
        return t
    if isinstance(default, bool):
        low = t.lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        raise bad
    if isinstance(default, int):
        try:
            return int(t)
        except ValueError:
            raise bad from None
    if isinstance(default, float):
        try:
            v = float(t)
        except ValueError:
            raise bad from None
        if not math.isfinite(v):
            raise bad
        return v
    if isinstance(default, (tuple, list)):
        try:
            vals = tuple(float(x) for x in t.split(","))  # an empty item ("3600,,7200") is an error
        except ValueError:
            raise bad from None
        if not vals or not all(math.isfinite(v) for v in vals):
            raise bad
        return vals
    if isinstance(default, str):
        if not t:
            raise bad
        return t
    try:
        v = json.loads(t)
    except ValueError:
        raise bad from None
    if not isinstance(v, (bool, int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise bad
    return v


def _kind(default) -> str:
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a finite number"
    if isinstance(default, (tuple, list)):
        return "comma-separated numbers"
    if isinstance(default, str):
        return "a name"
    return "a number or true/false"


def parse_policy_options(policies: list[str] | str, items: list[str] | None) -> dict:
    """``KEY=VALUE`` items → options valid for every policy in ``policies``."""
    names = [policies] if isinstance(policies, str) else list(policies)
    raw: dict[str, str] = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise OptschedError(f"{FLAG}: {item!r} is not KEY=VALUE")
        if key in raw:
            raise OptschedError(f"{FLAG}: {key} given twice")
        raw[key] = value
    if not raw:
        return {}
    out: dict = {}
    for policy in names:
        known = accepted_options(policy)
        declared = _declared(policy)
        for key, value in raw.items():
            if key not in known:
                choices = ", ".join(sorted(known)) or "none"
                raise OptschedError(f"{FLAG}: unknown key {key!r} for policy {policy} (it takes: {choices})")
            takes_none = "None" in {k.strip() for k in str(declared.get(key, "")).split("|")}
            if takes_none and value.strip().lower() in ("none", "null"):  # max_partners=none: every pair
                out[key] = None
                continue
            out[key] = _parse(key, value, _stand_in(known[key], declared.get(key, "")))
            d, v = known[key], out[key]
            if (isinstance(d, (int, float)) and not isinstance(d, bool) and d >= 0 and not isinstance(v, bool)
                    and isinstance(v, (int, float)) and v < 0):
                raise OptschedError(f"{FLAG}: {key}={value!r}: must be >= 0")
        _dry_run(policy, out, raw)
    return out


def _dry_run(policy: str, options: dict, raw: dict) -> None:
    """One solve on a two-job instance; an error that names an option is that option's."""
    import numpy as np

    from optsched.model import Instance
    from optsched.policy import solve_instance

    inst = Instance(job_ids=("a", "b"), gpu_types=("v100", "k80"), throughput=np.array([[2.0, 1.0], [1.0, 0.5]]),
                    scale_factor=np.ones(2), weight=np.ones(2), capacity=np.array([1.0, 1.0]),
                    steps_remaining=np.array([1e4, 2e4]), elapsed_time=np.array([100.0, 50.0]),
                    attained_service=np.zeros(2), arrival_time=np.array([0.0, 50.0]), time=100.0,
                    last_run_time=np.full(2, np.nan))
    try:
        solve_instance(inst, policy, "auto", 10.0, **options)
    except Exception as e:  # noqa: BLE001  (any failure of the policy on these values is reported, one line)
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        for key in options:
            if key in msg:
                raise OptschedError(f"{FLAG}: {key}={raw[key]!r}: {msg}") from None
        if not isinstance(e, OptschedError):  # an OptschedError naming no option: the toy instance, not the values
            given = ", ".join(f"{k}={raw[k]}" for k in options)
            raise OptschedError(f"{FLAG}: policy {policy} fails with {given} ({type(e).__name__}: {msg})") from None
