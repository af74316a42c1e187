"""optsched as a service: durable scheduling sessions and stateless solves.

    optsched.service.Session     plain-Python session (bookkeeping + rounds), durable in a Store
    optsched.service.Store       SQLite (WAL) persistence
    optsched.service.create_app  the FastAPI app (`optsched serve` runs it with uvicorn)

FastAPI is imported only by ``create_app`` (the ``service`` extra), so a
Session can be embedded in-process without it.
"""

from optsched.service.models import Limits, SessionConfig
from optsched.service.session import Conflict, NotFound, Session
from optsched.service.store import Store


def create_app(*args, **kwargs):
    from optsched.service.app import create_app as _create_app

    return _create_app(*args, **kwargs)


__all__ = ["Conflict", "Limits", "NotFound", "Session", "SessionConfig", "Store", "create_app"]
