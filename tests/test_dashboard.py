"""The dashboard in a real headless Chromium (selenium + Debian's chromium-driver):
`optsched serve` as a subprocess, a session driven through the API, and the page
checked against the API's answers after every round (round number, each GPU's
job, preemptions and migrations), with no console errors. Screenshots go to the
test's tmp dir (paths printed); DASHBOARD_SCREENSHOT=path also copies one there
(how docs/images/dashboard.png is made)."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import httpx
import pytest

from optsched.client import Client
from optsched.service import workload
from optsched.service.process import ServerProcess

TOKEN = "dash-token"
CHROMIUM, DRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver")
ROUNDS = 8  # the seed-0 workload preempts and migrates within these (asserted below)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("dash") / "sessions.db", token=TOKEN) as srv:
        yield srv


@pytest.fixture
def browser(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    if not (os.path.exists(CHROMIUM) and DRIVER):
        pytest.skip("chromium or chromedriver missing (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", "--window-size=1400,1000", f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(DRIVER), options=opts)
    drv.set_page_load_timeout(20)
    try:
        yield drv
    finally:
        drv.quit()


def severe(drv) -> list[dict]:
    return [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]


def wait_for(drv, fn, what: str, timeout: float = 10.0):
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(drv, timeout, poll_frequency=0.05).until(lambda d: fn(d))
    except Exception:
        raise AssertionError(f"the page never showed {what}; console: {drv.get_log('browser')}") from None


def cells(drv) -> dict[tuple[str, int], str]:
    """Every GPU cell on the page: (server, gpu) -> the job shown on it ('' when free)."""
    rows = drv.execute_script(
        "return [...document.querySelectorAll('.gpu')].map(c => [c.dataset.server, +c.dataset.gpu, c.dataset.job])")
    return {(s, g): j for s, g, j in rows}


def test_the_page_needs_the_token(server):
    s = Client(server.url, token=TOKEN).session(workload.CLUSTER)
    assert httpx.get(f"{server.url}/dashboard/{s.id}").status_code == 401
    assert httpx.get(f"{server.url}/dashboard/{s.id}?token=wrong").status_code == 401
    assert httpx.get(f"{server.url}/dashboard/{s.id}/events").status_code == 401
    assert httpx.get(f"{server.url}/dashboard/static/dashboard.js").status_code == 401
    assert httpx.get(f"{server.url}/dashboard/nosuch?token={TOKEN}").status_code == 404
    page = httpx.get(f"{server.url}/dashboard/{s.id}?token={TOKEN}")
    assert page.status_code == 200 and "/dashboard/static/dashboard.js" in page.text
    assert "http://" not in page.text and "https://" not in page.text  # nothing from a CDN
    js = httpx.get(f"{server.url}/dashboard/static/dashboard.js", cookies=page.cookies)
    assert js.status_code == 200 and "EventSource" in js.text


def test_events_stream_one_view_per_committed_change(server):
    """The SSE stream: the whole view at once, then one per committed change, in version order."""
    c = Client(server.url, token=TOKEN)
    s = c.session(workload.CLUSTER)
    got: list[dict] = []
    ready = threading.Event()

    def listen():
        with httpx.stream("GET", f"{server.url}/dashboard/{s.id}/events", params={"token": TOKEN}, timeout=20) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    got.append(json.loads(line[6:]))
                    ready.set()
                    if len(got) == 4:
                        return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    assert ready.wait(10)
    s.submit([next(workload.job_stream(3))])
    first = s.next_round()
    s.next_round()
    t.join(10)
    assert [v["kind"] for v in got] == ["snapshot", "submit", "next_round", "next_round"]
    assert [v["version"] for v in got] == sorted(v["version"] for v in got)
    assert got[2]["last_round"]["placement"] == first["placement"]
    assert got[3]["round"] == 2


def test_dashboard_follows_a_live_session_in_chromium(server, browser, tmp_path):
    c = Client(server.url, token=TOKEN)
    s = c.session(workload.CLUSTER, policy="max_min_fairness")
    browser.get(f"{server.url}/dashboard/{s.id}?token={TOKEN}")
    wait_for(browser, lambda d: d.find_element("id", "status").text == "live", "a live connection")
    wait_for(browser, lambda d: d.execute_script("return document.body.dataset.round") == "0", "round 0")
    assert "token" not in browser.current_url  # dropped from the address (and history) once the cookie is set
    shots, seen = [], {"preempted": None, "migrated": None}
    driver = workload.Driver(seed=0)
    for _ in range(ROUNDS):
        r = driver.step(s)
        n = r["round"] + 1
        wait_for(browser, lambda d: d.execute_script("return document.body.dataset.round") == str(n), f"round {n}")
        want = {(g["server"], g["gpu"]): j for j, slots in r["placement"].items() for g in slots}
        shown = cells(browser)
        assert {k: v for k, v in shown.items() if v} == want  # every GPU shows the job the API placed there
        assert set(shown) >= set(want)
        row = browser.find_element("css selector", f"#rounds tr[data-round='{r['round']}']")
        for kind, cls in (("preempted", "pre"), ("migrated", "mig")):
            tagged = [e.text for e in row.find_elements("css selector", f".tag.{cls}")]
            assert tagged == r[kind]
            if r[kind] and seen[kind] is None:
                seen[kind] = r["round"]
                path = tmp_path / f"dashboard-round{r['round']}-{kind}.png"
                browser.save_screenshot(str(path))
                shots.append(path)
        status = {tr.get_attribute("data-job"): tr.find_element("css selector", "td:nth-child(2)").text.split("\n")[0]
                  for tr in browser.find_elements("css selector", "#jobs tbody tr")}
        assert {j for j, st in status.items() if st == "running"} == set(r["placement"])
    assert seen["preempted"] is not None and seen["migrated"] is not None, seen
    explanation = browser.find_element("id", "explanation").text
    assert "max_min_fairness" in explanation and "Capacity:" in explanation
    final = tmp_path / "dashboard-final.png"
    browser.save_screenshot(str(final))
    shots.append(final)
    assert not severe(browser), severe(browser)
    for p in shots:
        print("screenshot:", p)
    if os.environ.get("DASHBOARD_SCREENSHOT"):
        shutil.copy(final, os.environ["DASHBOARD_SCREENSHOT"])
    browser.get("about:blank")  # close the stream before the server stops


def test_replay_of_a_recorded_simulation_in_chromium(server, browser, tmp_path):
    """`optsched simulate --out` recorded; the replay page reads its CSVs and the slider walks its rounds."""
    import csv
    import subprocess
    import sys

    out = tmp_path / "run"
    exe = Path(sys.executable).with_name("optsched")
    subprocess.run([str(exe), "simulate", "--sample", "8", "--quiet", "--out", str(out)], check=True,
                   capture_output=True, timeout=120)
    rounds = list(csv.DictReader(open(out / "rounds.csv")))
    browser.get(f"{server.url}/dashboard/replay?token={TOKEN}")
    browser.find_element("id", "files").send_keys(f"{out / 'rounds.csv'}\n{out / 'jobs.csv'}")
    wait_for(browser, lambda d: d.find_element("id", "nrounds").text == str(len(rounds)), "the recorded rounds")
    moved = next(i for i, r in enumerate(rounds) if int(r["migrated"]) or int(r["preempted"]))
    for i in (0, moved, len(rounds) - 1):
        browser.execute_script("const s = document.getElementById('slider'); s.value = arguments[0];"
                               "s.dispatchEvent(new Event('input'));", i)
        wait_for(browser, lambda d: d.execute_script("return document.body.dataset.round") == str(i), f"round {i}")
        row = browser.find_element("css selector", f"#rounds tr[data-round='{i}']")
        cols = [td.text for td in row.find_elements("css selector", "td")]
        r = rounds[i]
        assert cols[2:6] == [f"{r['running_jobs']} / {r['waiting_jobs']}", r["started"], r["preempted"], r["migrated"]]
        t = float(r["time"])
        jobs = list(csv.DictReader(open(out / "jobs.csv")))
        present = {j["job_id"] for j in jobs if float(j["arrival_time"]) <= t
                   and not (j["completion_time"] and float(j["completion_time"]) <= t)}
        shown = {tr.get_attribute("data-job") for tr in browser.find_elements("css selector", "#jobs tbody tr")}
        assert shown == present
        if i == moved:
            path = tmp_path / f"replay-round{i}.png"
            browser.save_screenshot(str(path))
            print("screenshot:", path)
    assert not severe(browser), severe(browser)


def test_a_slow_listener_loses_its_oldest_views_and_never_blocks():
    """The hub's queues are bounded: publishing never waits; a page that does not read keeps the newest views."""
    import asyncio

    from optsched.service.dashboard import Hub

    async def main():
        hub = Hub(size=3)
        slow, fast = hub.listen("s"), hub.listen("s")
        got = []
        for v in range(10):
            hub.publish("s", str(v))
            got.append(fast.get_nowait())  # a page that keeps up sees every view
        assert got == [str(v) for v in range(10)]
        assert [slow.get_nowait() for _ in range(slow.qsize())] == ["7", "8", "9"]
        assert hub.dropped == 7
        hub.leave("s", slow)
        hub.leave("s", fast)
        assert not hub.wants("s") and not hub.listeners  # nothing is built once the last page leaves

    asyncio.run(main())
