""""Did you mean ...?" for a misspelled name (a policy, an option, a key).

Every "unknown" message in optsched has one shape — ``unknown policy 'fifoo'
(choose from fifo, las, ...)`` — so the suggestion is added where messages
leave the program (the CLI's one-line errors, the service's 4xx bodies, the
policy entry point for the Python API) rather than at each of the places that
raise them."""

from __future__ import annotations

import difflib
import re

# "unknown <what> 'NAME' (choose from A, B, C)": NAME in single quotes (a repr), the choices.
_UNKNOWN = re.compile(r"unknown (?P<what>[\w .-]*?)\s*'(?P<name>[^']*)' \((?:choose from|one of) (?P<choices>[^)]*)\)")


def did_you_mean(name: str, choices) -> str | None:
    """The closest of ``choices`` to ``name`` (difflib, cutoff 0.6), or None."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return close[0] if close and close[0] != name else None


def with_suggestion(msg: str) -> str:
    """``msg`` with "; did you mean 'X'?" after an unknown name that is close to one of its choices."""
    m = _UNKNOWN.search(msg)
    if m is None or "did you mean" in msg:
        return msg
    choices = [c.strip() for c in m.group("choices").split(",") if c.strip()]
    best = did_you_mean(m.group("name"), choices)
    if best is None:
        return msg
    at = msg.index(" (", m.end("name"))
    return f"{msg[:at]}; did you mean {best!r}?{msg[at:]}"


__all__ = ["did_you_mean", "with_suggestion"]
