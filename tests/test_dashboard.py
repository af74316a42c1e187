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
# Waits for a page, a stream or a process are bounded only against a hang: a busy machine may take long.
HANG = 600.0


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
    drv.set_page_load_timeout(HANG)
    try:
        yield drv
    finally:
        drv.quit()


def severe(drv) -> list[dict]:
    return [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]


def wait_for(drv, fn, what: str, timeout: float = HANG):
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
    assert f"<title>optsched · session {s.id}</title>" in page.text and "{{" not in page.text
    js = httpx.get(f"{server.url}/dashboard/static/dashboard.js", cookies=page.cookies)
    assert js.status_code == 200 and "EventSource" in js.text


def test_events_stream_one_view_per_committed_change(server):
    """The SSE stream: the whole view at once, then one per committed change, in version order."""
    c = Client(server.url, token=TOKEN)
    s = c.session(workload.CLUSTER)
    got: list[dict] = []
    ready = threading.Event()

    def listen():
        with httpx.stream("GET", f"{server.url}/dashboard/{s.id}/events", params={"token": TOKEN}, timeout=HANG) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    got.append(json.loads(line[6:]))
                    ready.set()
                    if len(got) == 4:
                        return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    assert ready.wait(HANG)
    s.submit([next(workload.job_stream(3))])
    first = s.next_round()
    s.next_round()
    t.join(HANG)
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


def placement_map(rows: list[dict], i: int) -> dict[str, set]:
    """Job -> {(server, gpu)} after round ``i``, from placements.csv's changes (as the replay reads them)."""
    held: dict[str, set] = {}
    fresh = set()
    for e in rows:
        k = int(e["round"])
        if k > i:
            break
        if e["action"] == "release":
            held.pop(e["job_id"], None)
            continue
        if (k, e["job_id"]) not in fresh:
            fresh.add((k, e["job_id"]))
            held[e["job_id"]] = set()
        held[e["job_id"]].add((e["server"], int(e["gpu"])))
    return held


def test_replay_of_a_recorded_simulation_in_chromium(server, browser, tmp_path):
    """`optsched simulate --out` recorded; the replay page reads its CSVs and the slider walks its rounds;
    the cluster map (placements.csv, servers.csv) agrees with the rounds' own counts and the jobs' sizes."""
    import csv
    import subprocess
    import sys

    out = tmp_path / "run"
    exe = Path(sys.executable).with_name("optsched")
    subprocess.run([str(exe), "simulate", "--sample", "8", "--quiet", "--out", str(out)], check=True,
                   capture_output=True, timeout=HANG)
    rounds = list(csv.DictReader(open(out / "rounds.csv")))
    events = list(csv.DictReader(open(out / "placements.csv")))
    size = {s["server"]: int(s["gpus"]) for s in csv.DictReader(open(out / "servers.csv"))}
    gpus_of = {j["job_id"]: int(j["scale_factor"]) for j in csv.DictReader(open(out / "jobs.csv"))}
    for i, r in enumerate(rounds):  # the map, from changes only, against what the simulator counted
        held = placement_map(events, i)
        assert len(held) == int(r["running_jobs"])
        assert all(len(g) == gpus_of[j] for j, g in held.items())
        taken = [g for gs in held.values() for g in gs]
        assert len(taken) == len(set(taken)) and all(0 <= g < size[s] for s, g in taken)  # one job a GPU
        placed_now = {e["job_id"] for e in events if int(e["round"]) == i and e["action"] == "place"}
        assert len(placed_now) == int(r["started"]) + int(r["migrated"])
    browser.get(f"{server.url}/dashboard/replay?token={TOKEN}")
    browser.find_element("id", "files").send_keys("\n".join(str(out / f) for f in (
        "rounds.csv", "jobs.csv", "placements.csv", "servers.csv")))
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
        want = {(s, g): j for j, gs in placement_map(events, i).items() for s, g in gs}
        assert {k: v for k, v in cells(browser).items() if v} == want
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


# ---------------------------------------------------------------- optsched run / slurm --dashboard


def _wait_until_served(url: str, p, log: Path) -> None:
    """Until the dashboard of process ``p`` answers ``{url}/view``; its log if it died first."""
    for _ in range(6000):  # 0.1 s apart: a bound only a failed start reaches, however busy the machine
        try:
            if httpx.get(f"{url}/view", params={"token": TOKEN}).status_code == 200:
                return
        except httpx.HTTPError:
            assert p.poll() is None, log.read_text()
        threading.Event().wait(0.1)
    pytest.fail(f"{url} never answered")


def _sse(url: str, token: str, out: "queue.Queue", stop: threading.Event) -> None:
    """Every (event, data) of a dashboard's stream into ``out``, until it ends."""
    event = "message"
    try:
        with httpx.stream("GET", url, params={"token": token}, timeout=HANG) as r:
            for line in r.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    out.put((event, json.loads(line[6:])))
                    if event == "ended" or stop.is_set():
                        return
    finally:
        out.put(("closed", None))


def _virtual_run_dashboard():
    """The 6-job example on 2 slots in tests/test_runtime.py's virtual time, and a run dashboard's feed and server."""
    from optsched.cli.serve import listening_socket
    from optsched.service.dashboard.live import Feed, serve
    from optsched.traces.io import read_trace
    from tests.conftest import ROOT
    from tests.test_runtime import VirtualExecutor

    trace = read_trace(ROOT / "examples" / "workloads" / "small.csv")
    ex = VirtualExecutor("slot=2", {r.job_id: r.steps_total / r.duration for r in trace.jobs.itertuples()}, 0.4)
    feed = Feed("run")
    return trace, ex, feed, serve(feed, listening_socket("127.0.0.1", 0), TOKEN)


def test_a_run_shows_each_round_on_its_dashboard_as_it_advances(tmp_path):
    """optsched run's view (a read-only feed, its own server): the runtime on the virtual clock of
    tests/test_runtime.py waits after each publish until the page's stream has delivered that view,
    so every round is seen, in order, whatever the machine's speed; each view agrees with the run's
    own record of the round and with where its jobs run."""
    import queue

    from optsched.runtime.loop import RunConfig, run
    from optsched.service.dashboard.live import run_view

    trace, ex, feed, server = _virtual_run_dashboard()
    url = f"http://127.0.0.1:{server.port}"
    got: queue.Queue = queue.Queue()
    stop = threading.Event()
    t = threading.Thread(target=_sse, args=(f"{url}/dashboard/run/events", TOKEN, got, stop), daemon=True)
    try:
        assert httpx.get(f"{url}/dashboard/run/view").status_code == 401
        assert httpx.get(f"{url}/dashboard/other?token={TOKEN}").status_code == 404
        page = httpx.get(f"{url}/dashboard/run?token={TOKEN}").text  # says what it shows, not "session run"
        assert "<title>optsched · run</title>" in page
        assert '<h1>optsched <span class="muted">run</span> <code id="sid"></code></h1>' in page
        t.start()
        event, first = got.get(timeout=HANG)
        assert event == "view" and first["round"] == 0 and first["jobs"] == []  # before the first decision
        seen = []

        def observer(rt, kind, info):
            feed.publish(run_view(rt, kind, info))
            event, v = got.get(timeout=HANG)
            assert event == "view" and (v["kind"], v["round"]) == (kind, info["round"] + 1)
            running = {j["id"]: j["gpus"] for j in v["jobs"] if j["status"] == "running"}
            if kind == "decided":  # every placed job runs where the allocator put it, and only those
                assert running == v["last_round"]["placement"]
            assert {(g["server"], g["gpu"]) for gs in running.values() for g in gs} <= \
                {(s["id"], i) for s in v["servers"] for i in range(s["gpus"])}
            seen.append(v)

        res = run(trace, ex, RunConfig(round_length=2.0, poll_interval=0.02, throughputs="trace"),
                  run_dir=str(tmp_path / "run"), observer=observer)
        feed.end("finished")
        assert got.get(timeout=HANG) == ("ended", {"session_id": "run", "reason": "finished"})
    finally:
        stop.set()
        server.stop()
    rounds = res.rounds.to_dict("records")
    assert [(v["kind"], v["round"]) for v in seen] == [(k, r["round"] + 1) for r in rounds for k in ("decided", "round_end")]
    for v in seen[1::2]:
        r = rounds[v["round"] - 1]
        lr = v["last_round"]
        assert (len(lr["started"]), len(lr["preempted"]), len(lr["migrated"]), lr["recomputed"]) == \
            (r["started"], r["preempted"], r["migrated"], r["recomputed"])
    assert sum(r["preempted"] for r in rounds) > 0  # the trace makes the view show preemptions
    assert seen[-1]["finished_jobs"] == len(trace) and seen[-1]["jobs"] == []
    assert seen[1]["allocation"]["policy"] == "max_min_fairness" and seen[1]["allocation"]["explanation"]


def test_optsched_run_dashboard_streams_until_the_run_ends(tmp_path):
    """`optsched run --dashboard PORT` end to end: two never-ending jobs (a 5 ms floor per step) on one
    slot, so the run lasts until this test interrupts it, however fast the machine; the stream carries
    the rounds as they advance, then `ended` (interrupted); each round-end view equals rounds.csv."""
    import csv
    import queue
    import signal
    import subprocess
    import sys

    from optsched.service.process import free_port

    trace = tmp_path / "forever.csv"
    trace.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                     "a,1,0,100000000,regression:sleep_ms=5,100,0\nb,1,0,100000000,regression:sleep_ms=5,100,0\n")
    port, out = free_port(), tmp_path / "out"
    exe = Path(sys.executable).with_name("optsched")
    log = open(tmp_path / "run.log", "wb")
    p = subprocess.Popen([str(exe), "run", str(trace), "--cluster", "slot=1", "--round-length", "0.5", "--quiet",
                          "--grace", "10", "--out", str(out), "--dashboard", str(port)],
                         stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OPTSCHED_TOKEN": TOKEN})
    url = f"http://127.0.0.1:{port}/dashboard/run"
    got: queue.Queue = queue.Queue()
    try:
        _wait_until_served(url, p, tmp_path / "run.log")  # the server answers before the first round
        page = httpx.get(url, params={"token": TOKEN})
        assert page.status_code == 200 and "/dashboard/static/dashboard.js" in page.text
        threading.Thread(target=_sse, args=(f"{url}/events", TOKEN, got, threading.Event()), daemon=True).start()
        views = []
        while len({v["round"] for v in views if v["kind"] == "round_end"}) < 3:  # three rounds seen to end, live
            event, v = got.get(timeout=HANG)
            assert event == "view", (event, v)
            views.append(v)
        p.send_signal(signal.SIGINT)
        while True:
            event, v = got.get(timeout=HANG)
            if event != "view":
                break
            views.append(v)
        assert (event, v["reason"]) == ("ended", "interrupted")
        assert p.wait(HANG) == 130
    finally:
        if p.poll() is None:
            p.kill()
        log.close()
    versions = [v["version"] for v in views]
    # (the first, whole view may repeat the newest one already queued for the stream: same version)
    assert versions == sorted(versions) and [v["round"] for v in views] == sorted(v["round"] for v in views)
    rounds = list(csv.DictReader(open(out / "rounds.csv")))
    ends = [v for v in views if v["kind"] == "round_end"]
    assert ends[-1]["round"] == len(rounds)  # the last round recorded is the last the page saw end
    for v in ends:
        r, lr = rounds[v["round"] - 1], v["last_round"]
        assert [len(lr[k]) for k in ("started", "preempted", "migrated")] == \
            [int(r[k]) for k in ("started", "preempted", "migrated")]
    assert all(len([j for j in v["jobs"] if j["status"] == "running"]) <= 1 for v in views)  # one slot
    events = list(csv.DictReader(open(out / "placements.csv")))  # the replay's map: where each round placed
    for v in views:
        if v["kind"] == "decided":
            want = {j: {(g["server"], g["gpu"]) for g in gs} for j, gs in v["last_round"]["placement"].items()}
            assert placement_map(events, v["round"] - 1) == want


def test_the_slurm_agents_dashboard_shows_its_session_and_its_recorded_rounds(tmp_path):
    """`optsched slurm --dashboard`'s glue (cli/slurm.py) on the agent's own session and store, fed as the
    agent feeds it (slurm/agent.feed): the rounds recorded before the agent (re)started come first, then
    one view per applied round, each equal to the service's view of that session."""
    import queue
    from types import SimpleNamespace

    from optsched.cli import dashboard as dash
    from optsched.cli.slurm import _agent_dashboard
    from optsched.service.dashboard import view
    from optsched.service.session import Session, jsonable
    from optsched.service.store import Store
    from optsched.slurm.agent import SESSION_ID, feed

    store = Store(str(tmp_path / "agent.db"))
    session = Session.create({"session_id": SESSION_ID, "cluster": workload.CLUSTER, "round_length": 60}, store)
    jobs = workload.job_stream(1)

    def agent_round(k: int) -> dict:
        feed(session, {"new": [{"slurm_id": str(k), "spec": next(jobs)}], "gone": [], "notes": []})
        return session.next_round(expected_round=k)

    for k in range(3):  # an earlier run of the agent
        agent_round(k)
    live, server, on_round = _agent_dashboard(SimpleNamespace(session=session, store=store), dash, 0, "127.0.0.1",
                                              TOKEN)
    url = f"http://127.0.0.1:{server.port}/dashboard/{SESSION_ID}"
    got: queue.Queue = queue.Queue()
    try:
        now = httpx.get(f"{url}/view", params={"token": TOKEN}).json()
        assert now["round"] == 3 and [r["round"] for r in now["rounds"]] == [0, 1, 2]
        threading.Thread(target=_sse, args=(f"{url}/events", TOKEN, got, threading.Event()), daemon=True).start()
        assert got.get(timeout=HANG)[1]["round"] == 3
        for k in range(3, 6):
            on_round(agent_round(k))
            event, v = got.get(timeout=HANG)
            want = jsonable(view(session, "next_round"))
            assert event == "view" and {**v, "version": 0} == {**want, "version": 0}
        live.end("stopped")
        assert got.get(timeout=HANG) == ("ended", {"session_id": SESSION_ID, "reason": "stopped"})
    finally:
        server.stop()
        store.close()


def test_a_deleted_session_ends_its_pages_stream(server):
    """DELETE while a page listens: the stream's last event is `ended` (reason deleted), then it closes."""
    import queue

    s = Client(server.url, token=TOKEN).session(workload.CLUSTER)
    got: queue.Queue = queue.Queue()
    threading.Thread(target=_sse, args=(f"{server.url}/dashboard/{s.id}/events", TOKEN, got, threading.Event()),
                     daemon=True).start()
    assert got.get(timeout=HANG)[0] == "view"
    s.submit([next(workload.job_stream(2))])
    assert got.get(timeout=HANG)[1]["kind"] == "submit"
    assert httpx.delete(f"{server.url}/v1/sessions/{s.id}", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 204
    assert got.get(timeout=HANG) == ("ended", {"session_id": s.id, "reason": "deleted"})
    assert got.get(timeout=HANG) == ("closed", None)
    assert httpx.get(f"{server.url}/dashboard/{s.id}/view", params={"token": TOKEN}).status_code == 404


def test_the_page_says_when_its_session_is_deleted_in_chromium(server, browser, tmp_path):
    c = Client(server.url, token=TOKEN)
    s = c.session(workload.CLUSTER)
    s.submit([next(workload.job_stream(4))])
    s.next_round()
    browser.get(f"{server.url}/dashboard/{s.id}?token={TOKEN}")
    wait_for(browser, lambda d: d.execute_script("return document.body.dataset.round") == "1", "round 1")
    assert not browser.find_element("id", "ended").is_displayed()
    s.delete()
    wait_for(browser, lambda d: d.execute_script("return document.body.dataset.ended") == "deleted", "the deletion")
    note = browser.find_element("id", "ended")
    assert note.is_displayed() and "deleted" in note.text
    assert browser.find_element("id", "status").text == "deleted"
    assert browser.find_elements("css selector", ".gpu[data-job]:not([data-job=''])")  # its last state stays
    browser.save_screenshot(str(tmp_path / "dashboard-deleted.png"))
    print("screenshot:", tmp_path / "dashboard-deleted.png")
    assert not severe(browser), severe(browser)
    browser.get("about:blank")


def test_a_runs_page_in_chromium_follows_every_round_then_says_the_run_is_over(browser, tmp_path):
    """The run's page (same page and assets as a session's) in Chromium: after each view the run waits
    until the page shows it (its version), then the page's GPUs must be the view's; at the end it says so."""
    from optsched.runtime.loop import RunConfig, run
    from optsched.service.dashboard.live import run_view

    trace, ex, feed, server = _virtual_run_dashboard()
    url = f"http://127.0.0.1:{server.port}/dashboard/run?token={TOKEN}"
    seen = {"preempted": 0, "views": 0}
    try:
        browser.get(url)
        wait_for(browser, lambda d: d.find_element("id", "status").text == "live", "a live connection")

        def observer(rt, kind, info):
            v = run_view(rt, kind, info)
            feed.publish(v)
            version = feed.snapshot()["version"]
            wait_for(browser, lambda d: d.execute_script("return document.body.dataset.version") == str(version),
                     f"view {version}")
            want = {(g["server"], g["gpu"]): j["id"] for j in v["jobs"] for g in j["gpus"]}
            assert {k: j for k, j in cells(browser).items() if j} == want
            row = browser.find_element("css selector", f"#rounds tr[data-round='{info['round']}']")
            assert [e.text for e in row.find_elements("css selector", ".tag.pre")] == list(info["preempted"])
            seen["preempted"] += len(info["preempted"]) if kind == "decided" else 0
            seen["views"] += 1

        res = run(trace, ex, RunConfig(round_length=2.0, poll_interval=0.02, throughputs="trace"),
                  run_dir=str(tmp_path / "run"), observer=observer)
        feed.end("finished")
        wait_for(browser, lambda d: d.execute_script("return document.body.dataset.ended") == "finished", "the end")
        assert "run is over" in browser.find_element("id", "ended").text
        assert browser.find_element("id", "finished").text == str(len(trace))
        browser.save_screenshot(str(tmp_path / "run-dashboard-ended.png"))
        print("screenshot:", tmp_path / "run-dashboard-ended.png")
        assert not severe(browser), severe(browser)
        browser.get("about:blank")
    finally:
        server.stop()
    assert seen["views"] == 2 * len(res.rounds) and seen["preempted"] == res.summary["preemptions"] > 0


def test_optsched_slurm_dashboard_follows_the_agent_on_a_real_slurm(tmp_path):
    """`optsched slurm --dashboard PORT` beside a private local Slurm cluster: a held job with the
    contract is placed by the agent, and the page's views carry the agent's recorded decisions,
    round by round, until SIGTERM stops it (`ended`: stopped)."""
    import queue
    import signal
    import subprocess
    import sys
    import tempfile

    from optsched.slurm import cli as scli
    from optsched.slurm.agent import AgentDB
    from optsched.slurm.localcluster import unavailable_reason

    if unavailable_reason() is not None:
        pytest.skip(unavailable_reason())
    from optsched.service.process import free_port
    from tests._slurm_private import private_cluster

    c = private_cluster("dash", nodes="v100=1", gpus=2)
    work = tempfile.mkdtemp(prefix="optsched-dash-", dir="/tmp")
    os.chmod(work, 0o755)
    db, port = str(tmp_path / "agent.db"), free_port()
    got: queue.Queue = queue.Queue()
    p = sid = None
    try:
        sid = scli.run(["sbatch", "--parsable", "--hold", "--gres=gpu:1", "-J", "train", "-D", work, "-o", "out.log",
                        "--comment", "optsched: throughput=v100:1 steps=1000000", "--wrap", "sleep 600"],
                       c.env).stdout.strip().split(";")[0]
        p = subprocess.Popen([str(Path(sys.executable).with_name("optsched")), "slurm", "--db", db, "--round-length",
                              "1", "--slurm-conf", c.conf, "--dashboard", str(port)],
                             stdout=open(tmp_path / "agent.log", "wb"), stderr=subprocess.STDOUT,
                             env={**os.environ, **c.env, "OPTSCHED_TOKEN": TOKEN})
        url = f"http://127.0.0.1:{port}/dashboard/slurm"
        _wait_until_served(url, p, tmp_path / "agent.log")
        threading.Thread(target=_sse, args=(f"{url}/events", TOKEN, got, threading.Event()), daemon=True).start()
        views = []
        while len({v["round"] for v in views if v.get("last_round")}) < 3:
            event, v = got.get(timeout=HANG)
            assert event == "view", (event, v)
            views.append(v)
        p.send_signal(signal.SIGTERM)
        while (item := got.get(timeout=HANG))[0] == "view":
            views.append(item[1])
        assert item == ("ended", {"session_id": "slurm", "reason": "stopped"})
        assert p.wait(HANG) == 0
    finally:
        if p is not None and p.poll() is None:
            p.kill()
        if sid is not None:
            scli.run(["scancel", "--full", sid], c.env, check=False)
        c.remove()
    adb = AgentDB(db)
    try:
        decided = {r["round"]: r["decision"] for r in adb.rounds() if r["decision"] is not None}
    finally:
        adb.close()
    job = f"slurm-{sid}"
    assert any(job in v["last_round"]["placement"] for v in views if v.get("last_round"))
    for v in views:
        lr = v.get("last_round")
        if lr:  # every round the page showed is the one the agent recorded and applied
            assert {k: lr[k] for k in ("round", "placement", "started", "preempted", "migrated")} == \
                {k: decided[lr["round"]][k] for k in ("round", "placement", "started", "preempted", "migrated")}
            running = {j["id"]: j["gpus"] for j in v["jobs"] if j["status"] == "running"}
            assert running == lr["placement"]
