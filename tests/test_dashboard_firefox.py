"""The dashboard in a real headless Firefox (Debian's `firefox-esr`, driven over WebDriver BiDi by
tests/_firefox_bidi.py: no geckodriver). The same checks as tests/test_dashboard.py's Chromium tests,
on the same server fixture: a live session's page follows every round (each GPU's job, preemptions,
migrations, the jobs' status) with no console or JavaScript errors, and the replay page walks a
recorded simulation. Screenshots go to the test's tmp dir (paths printed). Every wait is bounded only
against a hang: the page is polled until it shows what the API answered, however slow the machine."""

from __future__ import annotations

import csv
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from optsched.client import Client
from optsched.service import workload
from tests._firefox_bidi import FIREFOX
from tests.test_dashboard import HANG, ROUNDS, TOKEN, placement_map, server  # noqa: F401 (server: a fixture)

# The page's state in one call: round, version, every GPU's job, each job's status, the live pill.
STATE = """({round: document.body.dataset.round, status: document.getElementById('status')?.textContent,
  cells: [...document.querySelectorAll('.gpu')].map(c => [c.dataset.server, +c.dataset.gpu, c.dataset.job]),
  jobs: [...document.querySelectorAll('#jobs tbody tr')].map(
    tr => [tr.dataset.job, tr.querySelector('td:nth-child(2)').innerText.split('\\n')[0]])})"""


def row(ff, i: int):
    """Round ``i``'s row in the rounds table: its cells' text and its preempted / migrated tags."""
    return ff.evaluate(f"""(r => r && {{cols: [...r.querySelectorAll('td')].map(td => td.innerText),
      pre: [...r.querySelectorAll('.tag.pre')].map(e => e.innerText),
      mig: [...r.querySelectorAll('.tag.mig')].map(e => e.innerText)}})
      (document.querySelector("#rounds tr[data-round='{i}']"))""")


@pytest.fixture(scope="module")
def _firefox():
    if FIREFOX is None:
        pytest.skip("firefox-esr is not installed (apt-get install firefox-esr): the Firefox dashboard tests skip")
    pytest.importorskip("websocket", reason="websocket-client is not installed (pip install websocket-client)")
    from tests._firefox_bidi import Firefox

    ff = Firefox(timeout=HANG)
    try:
        yield ff
    finally:
        ff.quit()


@pytest.fixture
def firefox(_firefox):
    """The module's Firefox, its log emptied; its tab back on about:blank after the test (the page's
    stream closes before the server stops)."""
    _firefox.get("about:blank")
    _firefox.logs.clear()
    yield _firefox
    _firefox.get("about:blank")


def wait_for(ff, fn, what: str):
    """Poll the page until ``fn(ff)`` is true; fails only on a hang (HANG seconds)."""
    stop = threading.Event()
    timer = threading.Timer(HANG, stop.set)
    timer.start()
    try:
        while not stop.is_set():
            got = fn(ff)
            if got:
                return got
            stop.wait(0.05)
    finally:
        timer.cancel()
    raise AssertionError(f"the page never showed {what}; log: {ff.logs}")


def test_dashboard_follows_a_live_session_in_firefox(firefox, server, tmp_path):  # noqa: F811
    s = Client(server.url, token=TOKEN).session(workload.CLUSTER, policy="max_min_fairness")
    firefox.get(f"{server.url}/dashboard/{s.id}?token={TOKEN}")
    wait_for(firefox, lambda f: f.evaluate(STATE)["status"] == "live", "a live connection")
    wait_for(firefox, lambda f: f.evaluate(STATE)["round"] == "0", "round 0")
    assert "token" not in firefox.evaluate("location.href")  # dropped from the address once the cookie is set
    shots, seen = [], {"preempted": None, "migrated": None}
    driver = workload.Driver(seed=0)
    for _ in range(ROUNDS):
        r = driver.step(s)
        n = str(r["round"] + 1)
        page = wait_for(firefox, lambda f: (st := f.evaluate(STATE))["round"] == n and st, f"round {n}")
        want = {(g["server"], g["gpu"]): j for j, slots in r["placement"].items() for g in slots}
        shown = {(sv, g): j for sv, g, j in page["cells"]}
        assert {k: v for k, v in shown.items() if v} == want  # every GPU shows the job the API placed there
        assert set(shown) >= set(want)
        tags = row(firefox, r["round"])
        for kind, cls in (("preempted", "pre"), ("migrated", "mig")):
            assert tags[cls] == r[kind]
            if r[kind] and seen[kind] is None:
                seen[kind] = r["round"]
                shots.append(firefox.screenshot(tmp_path / f"firefox-round{r['round']}-{kind}.png"))
        assert {j for j, st in page["jobs"] if st == "running"} == set(r["placement"])
    assert seen["preempted"] is not None and seen["migrated"] is not None, seen
    explanation = firefox.evaluate("document.getElementById('explanation').innerText")
    assert "max_min_fairness" in explanation and "Capacity:" in explanation
    shots.append(firefox.screenshot(tmp_path / "firefox-final.png"))
    s.delete()  # the stream's `ended` event, then its close: the page says so and keeps its last state
    wait_for(firefox, lambda f: f.evaluate("document.body.dataset.ended") == "deleted", "the deletion")
    ended = firefox.evaluate("(e => ({hidden: e.hidden, text: e.innerText}))(document.getElementById('ended'))")
    assert not ended["hidden"] and "deleted" in ended["text"]
    assert firefox.evaluate(STATE)["status"] == "deleted"
    assert any(j for _, _, j in firefox.evaluate(STATE)["cells"])
    assert not firefox.errors(), firefox.errors()
    for p in shots:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        print("screenshot:", p)


def test_replay_of_a_recorded_simulation_in_firefox(firefox, server, tmp_path):  # noqa: F811
    """`optsched simulate --out` recorded; the page reads its CSVs (chosen in the file input as a person
    would) and the slider walks its rounds: each row and the cluster map as the CSVs say."""
    out = tmp_path / "run"
    subprocess.run([str(Path(sys.executable).with_name("optsched")), "simulate", "--sample", "8", "--quiet",
                    "--out", str(out)], check=True, capture_output=True, timeout=HANG)
    rounds = list(csv.DictReader(open(out / "rounds.csv")))
    events = list(csv.DictReader(open(out / "placements.csv")))
    jobs = list(csv.DictReader(open(out / "jobs.csv")))
    firefox.get(f"{server.url}/dashboard/replay?token={TOKEN}")
    firefox.set_files("#files", [out / f for f in ("rounds.csv", "jobs.csv", "placements.csv", "servers.csv")])
    wait_for(firefox, lambda f: f.evaluate("document.getElementById('nrounds').textContent") == str(len(rounds)),
             "the recorded rounds")
    moved = next(i for i, r in enumerate(rounds) if int(r["migrated"]) or int(r["preempted"]))
    for i in (0, moved, len(rounds) - 1):
        firefox.evaluate(f"(s => {{s.value = {i}; s.dispatchEvent(new Event('input'))}})"
                         "(document.getElementById('slider'))")
        page = wait_for(firefox, lambda f: (st := f.evaluate(STATE))["round"] == str(i) and st, f"round {i}")
        r, t = rounds[i], float(rounds[i]["time"])
        assert row(firefox, i)["cols"][2:6] == [f"{r['running_jobs']} / {r['waiting_jobs']}", r["started"],
                                                r["preempted"], r["migrated"]]
        present = {j["job_id"] for j in jobs if float(j["arrival_time"]) <= t
                   and not (j["completion_time"] and float(j["completion_time"]) <= t)}
        assert {j for j, _ in page["jobs"]} == present
        want = {(sv, g): j for j, gs in placement_map(events, i).items() for sv, g in gs}
        assert {(sv, g): j for sv, g, j in page["cells"] if j} == want
        if i == moved:
            print("screenshot:", firefox.screenshot(tmp_path / f"firefox-replay-round{i}.png"))
    assert not firefox.errors(), firefox.errors()
