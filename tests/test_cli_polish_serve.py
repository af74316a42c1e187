"""`optsched serve` binds its port before saying it listens: a port in use is one
line naming --port and the host, exit 2 (not uvicorn's error after "listening", exit 3)."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

import optsched.cli.serve as serve
from optsched.cli import app

runner = CliRunner()


@pytest.fixture
def busy_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


@pytest.fixture
def served(monkeypatch):
    """Record the socket serve hands to the server, instead of serving."""
    calls = []

    def fake(sock, config):
        calls.append((sock.getsockname(), _accepts(sock.getsockname()), config.port))

    monkeypatch.setattr(serve, "_serve_on", fake)
    return calls


def _accepts(addr) -> bool:
    with socket.create_connection(addr, timeout=2):
        return True


def test_port_in_use_is_one_line_naming_port(busy_port, served, tmp_path):
    res = runner.invoke(app, ["serve", "--port", str(busy_port), "--db", str(tmp_path / "s.db")])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (f"error: --port: {busy_port} is already in use on 127.0.0.1 "
                                  "(stop the process using it, or choose another --port)")
    assert "listening" not in res.output and not served


def test_an_address_not_of_this_machine_names_host(served, tmp_path):
    res = runner.invoke(app, ["serve", "--host", "192.0.2.1", "--token", "t", "--port", "0",
                              "--db", str(tmp_path / "s.db")])  # TEST-NET-1: never a local address
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: --host: 192.0.2.1 is not an address of this machine")
    assert not served


def test_listening_is_logged_once_the_socket_listens(served, tmp_path):
    res = runner.invoke(app, ["serve", "--port", "0", "--db", str(tmp_path / "s.db")])
    assert res.exit_code == 0, res.output
    (host, port), accepted, config_port = served[0]
    assert accepted and host == "127.0.0.1" and port > 0 and config_port == port
    assert f"listening on http://127.0.0.1:{port} " in res.stderr  # the port the system chose, not 0


def test_listening_socket_bound_and_listening():
    sock = serve.listening_socket("127.0.0.1", 0)
    try:
        assert _accepts(sock.getsockname())
    finally:
        sock.close()


def test_serve_refuses_a_database_in_a_missing_folder(tmp_path):
    """A mistyped --db path grew the missing folders and started on a new, empty database."""
    res = runner.invoke(app, ["serve", "--port", "0", "--db", str(tmp_path / "nope" / "deeper" / "s.db")])
    assert res.exit_code == 2
    assert "does not exist" in (res.stderr or res.output)
    assert not (tmp_path / "nope").exists()
