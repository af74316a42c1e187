"""`optsched solve --json`'s text: json.dumps(obj, indent=2) byte for byte, faster,
except that a non-finite float is written as null (NaN and Infinity are not JSON)."""

from __future__ import annotations

import json
import math
from json.encoder import c_make_encoder, encode_basestring_ascii

from optsched.model import gc_paused

_SCALARS = frozenset({str, int, float, bool, type(None)})


class _Fallback(Exception):
    """A value this writer does not handle itself: json.dumps writes the whole document."""


def dumps_indented(obj, indent: int = 2) -> str:
    """``json.dumps(obj, indent=indent)``, the same text, at a fraction of the time for
    large documents: every dict or list whose values are all plain scalars (an
    allocation row, a table of 100,000 numbers) is written by the C encoder in one
    call, with the indentation as its item separator, instead of json's pure-Python
    indenting encoder. Anything else (subclasses of the JSON types, numpy values,
    keys that are not text, cycles) goes to json.dumps itself."""
    if c_make_encoder is None:
        return _dumps_plain(obj, indent)
    try:
        out: list[str] = []
        with gc_paused():  # the encoder's item lists would trigger collections over a large heap
            _Writer(indent).write(obj, 0, out)
        return "".join(out)
    except (_Fallback, RecursionError, TypeError, ValueError):  # (json.dumps raises its own error, if any)
        return _dumps_plain(obj, indent)


def _dumps_plain(obj, indent: int) -> str:
    """json.dumps, with non-finite float values written as null."""
    try:
        return json.dumps(obj, indent=indent, allow_nan=False)
    except ValueError as e:
        if "Out of range float" not in str(e):
            raise
    return json.dumps(_finite(obj, set()), indent=indent)  # (a non-finite key stays json's string "NaN")


def _finite(o, seen: set):
    """A copy with every non-finite float value as None (the slow path: rare)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, (dict, list, tuple)):
        if id(o) in seen:
            raise ValueError("Circular reference detected")
        seen.add(id(o))
        out = {k: _finite(v, seen) for k, v in o.items()} if isinstance(o, dict) else [_finite(v, seen) for v in o]
        seen.discard(id(o))
        return out
    return o


def _no_default(o):
    raise _Fallback


class _Writer:
    def __init__(self, indent: int):
        self.indent = indent
        self._flat: dict[int, object] = {}

    def flat(self, depth: int):
        """The C encoder whose item separator is a new line at ``depth``."""
        enc = self._flat.get(depth)
        if enc is None:
            sep = ",\n" + " " * (self.indent * depth)
            # (markers None: no cycle check, the containers it gets hold only scalars)
            # allow_nan False: a NaN or Infinity raises, and the slow path writes null.
            c_enc = c_make_encoder(None, _no_default, encode_basestring_ascii, None, ": ", sep, False, False, False)
            enc = self._flat[depth] = lambda o: "".join(c_enc(o, 0))
        return enc

    def write(self, o, depth: int, out: list[str]) -> None:
        t = type(o)
        if t in _SCALARS:
            out.append(self.flat(0)(o))
            return
        if t is dict:
            values, opening, closing = o.values(), "{", "}"
        elif t is list or t is tuple:
            values, opening, closing = o, "[", "]"
        else:
            raise _Fallback
        if not o:
            out.append(opening + closing)
            return
        inner = "\n" + " " * (self.indent * (depth + 1))
        end = "\n" + " " * (self.indent * depth) + closing
        if all(type(v) in _SCALARS for v in values):  # one call to the C encoder
            out.append(opening + inner + self.flat(depth + 1)(o)[1:-1] + end)
            return
        sep = opening + inner
        if t is dict:
            for k, v in o.items():
                if type(k) is not str:
                    raise _Fallback
                out.append(sep + encode_basestring_ascii(k) + ": ")
                self.write(v, depth + 1, out)
                sep = "," + inner
        else:
            for v in o:
                out.append(sep)
                self.write(v, depth + 1, out)
                sep = "," + inner
        out.append(end)
