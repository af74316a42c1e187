"""A small WebDriver BiDi client for the browser tests: Debian's `firefox-esr`, headless, driven over
the WebSocket its remote agent opens (`--remote-debugging-port`), with no geckodriver.

One synchronous connection: a command is sent and messages are read until its answer; the events
read meanwhile (`log.entryAdded`: console messages and uncaught JavaScript errors) are kept in
``Firefox.logs``. Values come back from the page as JSON text (``evaluate``), so nothing here
decodes BiDi's remote values except an element's reference (``set_files``)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

FIREFOX = shutil.which("firefox-esr") or shutil.which("firefox")
# Quiet start-up of a fresh profile: no first-run pages, update or telemetry pings, captive-portal
# probes (the machine may be offline; a request that waits on the network only slows the page down).
PREFS = {
    "browser.shell.checkDefaultBrowser": False, "browser.startup.homepage_override.mstone": "ignore",
    "datareporting.policy.dataSubmissionEnabled": False, "toolkit.telemetry.reportingpolicy.firstRun": False,
    "app.update.disabledForTesting": True, "network.captive-portal-service.enabled": False,
    "network.connectivity-service.enabled": False, "browser.safebrowsing.update.enabled": False,
}


class BiDiError(AssertionError):
    """A command the browser answered with an error (its name and message), or a script that threw."""


class Firefox:
    """A headless Firefox and one BiDi session on its first tab (``context``)."""

    def __init__(self, timeout: float, width: int = 1400, height: int = 1000):
        import websocket  # (websocket-client, the test extra's)

        self.dir = tempfile.mkdtemp(prefix="optsched-firefox-")
        profile = Path(self.dir) / "profile"
        profile.mkdir()
        (profile / "user.js").write_text("".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n"
                                                 for k, v in PREFS.items()))
        self.proc = subprocess.Popen([FIREFOX, "--headless", "--no-remote", "--remote-debugging-port", "0",
                                      "--profile", str(profile), "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "MOZ_CRASHREPORTER_DISABLE": "1"})
        self.stderr: list[str] = []
        self.logs: list[dict] = []
        self._id = 0
        found = threading.Event()
        url: list[str] = []

        def read_stderr():  # keeps draining it after the address, so Firefox never blocks on a full pipe
            for line in self.proc.stderr:
                self.stderr.append(line)
                m = re.search(r"WebDriver BiDi listening on (ws://\S+)", line)
                if m and not found.is_set():
                    url.append(m.group(1))
                    found.set()
            found.set()  # (Firefox exited: no address)

        threading.Thread(target=read_stderr, daemon=True).start()
        try:
            if not found.wait(timeout) or not url:
                raise RuntimeError("firefox never opened its WebDriver BiDi port:\n" + "".join(self.stderr))
            # Firefox refuses a WebSocket handshake that carries an Origin header (remote.allow.origins).
            self.ws = websocket.create_connection(url[0] + "/session", timeout=timeout, suppress_origin=True)
            self.version = self.send("session.new", capabilities={})["capabilities"]["browserVersion"]
            self.send("session.subscribe", events=["log.entryAdded"])
            self.context = self.send("browsingContext.getTree")["contexts"][0]["context"]
            self.send("browsingContext.setViewport", context=self.context,
                      viewport={"width": width, "height": height})
        except BaseException:
            self.quit()
            raise

    def send(self, method: str, **params) -> dict:
        """The result of one command; the events that arrive before it go to ``logs``."""
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("type") == "event":
                if msg["method"] == "log.entryAdded":
                    self.logs.append(msg["params"])
            elif msg.get("id") == self._id:
                if msg.get("type") == "error":
                    raise BiDiError(f"{method}: {msg['error']}: {msg.get('message')}")
                return msg["result"]

    def get(self, url: str) -> None:
        self.send("browsingContext.navigate", context=self.context, url=url, wait="complete")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page, passed through JSON."""
        r = self.send("script.evaluate", expression=f"JSON.stringify(({expression}) ?? null)",
                      target={"context": self.context}, awaitPromise=False, resultOwnership="none")
        if r["type"] == "exception":
            raise BiDiError(f"{expression}: {r['exceptionDetails'].get('text')}")
        return json.loads(r["result"]["value"])

    def set_files(self, selector: str, paths: list[str]) -> None:
        """Choose ``paths`` in the page's file input ``selector`` (as a person would; its change event fires)."""
        r = self.send("script.evaluate", expression=f"document.querySelector({json.dumps(selector)})",
                      target={"context": self.context}, awaitPromise=False, resultOwnership="root")
        self.send("input.setFiles", context=self.context, element={"sharedId": r["result"]["sharedId"]},
                  files=[str(p) for p in paths])

    def errors(self) -> list[dict]:
        """The tab's console errors and uncaught JavaScript errors (``type`` javascript) logged so far
        (not the browser's own: its start-up may log errors about services it cannot reach offline)."""
        return [e for e in self.logs if e.get("level") == "error"
                and e.get("source", {}).get("context") in (None, self.context)]

    def screenshot(self, path: Path) -> Path:
        data = self.send("browsingContext.captureScreenshot", context=self.context)["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)

    def quit(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                try:
                    self.send("browser.close")
                except Exception:  # (the connection closes as the browser does)
                    pass
                self.ws.close()
            self.proc.wait(30)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
