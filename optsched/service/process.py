"""Run `optsched serve` as a subprocess on a free loopback port (tests, benches,
examples): ``with ServerProcess(db=path) as srv: Client(srv.url)``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerProcess:
    """`optsched serve --port <free port> --db <db>` in a child process. ``startup_timeout`` only guards
    against a server that never answers (a start takes seconds, far more on a busy machine)."""

    def __init__(self, db: str | Path, port: int | None = None, token: str | None = None, args: list[str] = (),
                 log: str | Path | None = None, startup_timeout: float = 600.0):
        self.db, self.port, self.token = str(db), port or free_port(), token
        self.args, self.startup_timeout = list(args), startup_timeout
        self.log_path = Path(log) if log else Path(f"{self.db}.serve.log")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "ServerProcess":
        exe = Path(sys.executable).with_name("optsched")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "optsched"]
        cmd += ["serve", "--port", str(self.port), "--db", self.db, *self.args]
        env = dict(os.environ)
        env.pop("OPTSCHED_TOKEN", None)
        if self.token:
            env["OPTSCHED_TOKEN"] = self.token
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"optsched serve exited with {self.proc.returncode}: {self.log()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"optsched serve did not answer within {self.startup_timeout:g} s: {self.log()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers, no flushing — what a crash looks like."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        if getattr(self, "_log", None):
            self._log.close()

    def log(self) -> str:
        try:
            return self.log_path.read_text()[-4000:]
        except OSError:
            return ""

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
