// Replay of a recorded run (the --out folder of `optsched simulate` / `optsched run`):
// the files are read in the browser (nothing is uploaded), a slider walks the rounds;
// placements.csv and servers.csv, when chosen, give the cluster map.
"use strict";


const replay = { rounds: [], jobs: [], index: 0, servers: [], placements: [] };
window.optschedReplay = replay;

// CSV as the simulator writes it (pandas: a header row, quoted fields when needed).
function parseCsv(text) {
  const rows = [];
  let row = [], field = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') { field += '"'; i++; }
      else if (ch === '"') quoted = false;
      else field += ch;
    } else if (ch === '"') quoted = true;
    else if (ch === ",") { row.push(field); field = ""; }
    else if (ch === "\n" || ch === "\r") {
      if (ch === "\r" && text[i + 1] === "\n") i++;
      row.push(field); field = "";
      if (row.length > 1 || row[0] !== "") rows.push(row);
      row = [];
    } else field += ch;
  }
  if (field !== "" || row.length) { row.push(field); rows.push(row); }
  const head = rows.shift() || [];
  return rows.map((r) => Object.fromEntries(head.map((h, i) => [h, r[i] === undefined ? "" : r[i]])));
}

const f = (x) => (x === "" || x === undefined ? null : Number(x));
const yes = (x) => x === "True" || x === "true" || x === "1";

function utilTypes() {
  return replay.rounds.length ? Object.keys(replay.rounds[0]).filter((k) => k.startsWith("util_")) : [];
}

function plot() {
  const ns = "http://www.w3.org/2000/svg", W = 640, H = 90, n = replay.rounds.length;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("aria-label", "utilization by GPU type");
  const x = (i) => (n > 1 ? (i / (n - 1)) * (W - 4) + 2 : W / 2);
  for (const k of utilTypes()) {
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", replay.rounds.map((r, i) => `${x(i).toFixed(1)},${(H - 2 - (f(r[k]) || 0) * (H - 4)).toFixed(1)}`).join(" "));
    line.setAttribute("fill", "none"); line.setAttribute("stroke", colour("type:" + k.slice(5))); line.setAttribute("stroke-width", "1.2");
    svg.append(line);
  }
  const cursor = document.createElementNS(ns, "line");
  cursor.setAttribute("id", "cursor"); cursor.setAttribute("y1", 0); cursor.setAttribute("y2", H);
  cursor.setAttribute("stroke", "#1d1d1f"); cursor.setAttribute("stroke-width", "1");
  svg.append(cursor);
  replay.x = x;
  $("usage").replaceChildren(svg, el("div", {}, ...utilTypes().map((k) => el("span", { style: "margin-right:10px" },
    el("span", { class: "swatch", style: `background:${colour("type:" + k.slice(5))}` }), `${k.slice(5)} utilization`))));
}

function jobStatus(j, t) {
  const arr = f(j.arrival_time), start = f(j.first_start), end = f(j.completion_time);
  if (arr === null || t < arr) return null;
  if (end !== null && end <= t) return "finished";
  if (start !== null && start <= t) return "started";
  return "waiting";
}

// The map after round i: placements.csv holds only changes (a job's GPUs when it starts or moves, a
// release when it stops), applied in order; moving forward continues from the last map, back restarts.
function mapAt(i) {
  if (replay.map === undefined || i < replay.mapRound) {
    replay.map = new Map(); replay.next = 0; replay.mapRound = -1;
  }
  const ev = replay.placements, moved = new Set(), fresh = new Set();
  while (replay.next < ev.length && Number(ev[replay.next].round) <= i) {
    const e = ev[replay.next++], k = Number(e.round);
    const key = `${k}/${e.job_id}`;
    if (e.action === "release") { replay.map.delete(e.job_id); continue; }
    if (!fresh.has(key)) {  // the first of a job's rows this round replaces where it was
      fresh.add(key);
      if (k === i && replay.map.has(e.job_id)) moved.add(e.job_id);
      replay.map.set(e.job_id, []);
    }
    replay.map.get(e.job_id).push(`${e.server}/${e.gpu}`);
  }
  replay.mapRound = i;
  const placed = new Set([...fresh].filter((key) => Number(key.split("/")[0]) === i).map((key) => key.slice(key.indexOf("/") + 1)));
  return { map: replay.map, placed, moved };
}

function showCluster(i) {
  const box = $("cluster");
  if (!replay.servers.length || !replay.placementsRead) {
    box.textContent = "No placements.csv and servers.csv among the chosen files: no cluster map " +
      "(optsched simulate --out and optsched run --out record them).";
    return;
  }
  const { map, placed, moved } = mapAt(i);
  const onGpu = new Map();
  for (const [job, gpus] of map) for (const g of gpus) onGpu.set(g, onGpu.has(g) ? `${onGpu.get(g)}+${job}` : job);
  box.replaceChildren();
  for (const s of replay.servers) {
    const gpus = el("div", { class: "gpus" });
    for (let g = 0; g < Number(s.gpus); g++) {
      const job = onGpu.get(`${s.server}/${g}`);
      const cell = el("div", { class: "gpu" + (job ? "" : " free"), "data-server": s.server, "data-gpu": g,
                               "data-job": job || "", title: `${s.server} GPU ${g} (${s.gpu_type}): ${job || "free"}` },
                      job || s.gpu_type);
      if (job) {
        cell.style.background = colour(job.split("+")[0]);
        if (moved.has(job)) cell.classList.add("flash-migrated");
        else if (placed.has(job)) cell.classList.add("flash-started");
      }
      gpus.append(cell);
    }
    box.append(el("div", { class: "server" }, el("div", { class: "name" }, `${s.server} · ${s.gpu_type}`), gpus));
  }
}

function show(i) {
  replay.index = i;
  const r = replay.rounds[i];
  if (!r) return;
  const t = f(r.time);
  $("round").textContent = i; $("time").textContent = duration(t);
  document.body.dataset.round = i;
  const c = document.getElementById("cursor");
  if (c) { c.setAttribute("x1", replay.x(i)); c.setAttribute("x2", replay.x(i)); }
  const util = utilTypes().map((k) => `${k.slice(5)} ${(100 * (f(r[k]) || 0)).toFixed(0)} %`).join(", ");
  $("explanation").replaceChildren(
    el("p", {}, `Round ${i} at ${duration(t)}: ${r.running_jobs} of ${r.active_jobs} active jobs ran, ${r.waiting_jobs} waited.`),
    el("p", {}, `Started ${r.started}, preempted ${r.preempted}, migrated ${r.migrated}, completed ${r.completed}.`),
    el("p", {}, yes(r.recomputed) ? `The allocation was recomputed (solver ${(1000 * f(r.solver_seconds)).toFixed(1)} ms).`
                                   : "The allocation in force was kept (no solve)."),
    el("p", {}, `Utilization: ${util || "–"}.`));
  showCluster(i);
  const rb = $("rounds").tBodies[0];
  rb.replaceChildren();
  for (let k = Math.max(0, i - 8); k <= Math.min(replay.rounds.length - 1, i + 8); k++) {
    const q = replay.rounds[k];
    const tr = el("tr", { "data-round": k, style: k === i ? "background:#fff7d6" : "" },
      el("td", {}, k), el("td", {}, duration(f(q.time))), el("td", {}, `${q.running_jobs} / ${q.waiting_jobs}`),
      el("td", {}, q.started), el("td", {}, q.preempted), el("td", {}, q.migrated),
      el("td", {}, yes(q.recomputed) ? "yes" : "no"),
      el("td", {}, yes(q.recomputed) ? `${(1000 * f(q.solver_seconds)).toFixed(1)} ms` : "–"));
    rb.append(tr);
  }
  const jb = $("jobs").tBodies[0];
  jb.replaceChildren();
  const order = { started: 0, waiting: 1, finished: 2 };
  const shown = replay.jobs.map((j) => [j, jobStatus(j, t)]).filter(([, s]) => s && s !== "finished")
    .sort((a, b) => order[a[1]] - order[b[1]]);
  for (const [j, s] of shown.slice(0, 200)) {
    jb.append(el("tr", { "data-job": j.job_id },
      el("td", {}, el("span", { class: "swatch", style: `background:${colour(String(j.job_id))}` }), j.job_id),
      el("td", { class: s === "started" ? "status-running" : "status-queued" }, s),
      el("td", {}, j.model || "–"), el("td", {}, j.scale_factor || "–"),
      el("td", {}, duration(f(j.arrival_time))), el("td", {}, duration(f(j.first_start))),
      el("td", {}, duration(f(j.completion_time))), el("td", {}, j.preemptions || "0")));
  }
}

// optsched run's --out names some columns its own way: read them as the simulator's.
function asSimulated(rounds, jobs) {
  for (const r of rounds) {
    if (r.time === undefined && r.start !== undefined) {
      Object.assign(r, { time: r.start, active_jobs: r.active, running_jobs: r.running,
                         waiting_jobs: String(Number(r.active) - Number(r.running)), completed: r.finished_or_failed,
                         solver_seconds: r.solve_seconds });
    }
  }
  for (const j of jobs) {
    if (j.completion_time === undefined && j.finish_time !== undefined) j.completion_time = j.finish_time;
  }
}

async function load(files) {
  for (const file of files) {
    const rows = parseCsv(await file.text());
    if (file.name.startsWith("rounds")) replay.rounds = rows;
    else if (file.name.startsWith("jobs")) replay.jobs = rows;
    else if (file.name.startsWith("placements")) { replay.placements = rows; replay.placementsRead = true; }
    else if (file.name.startsWith("servers")) replay.servers = rows;
  }
  asSimulated(replay.rounds, replay.jobs);
  replay.map = undefined;
  if (!replay.rounds.length) { $("usage").textContent = "No rounds.csv among the chosen files."; return; }
  $("nrounds").textContent = replay.rounds.length;
  const s = $("slider");
  s.max = replay.rounds.length - 1; s.value = 0; s.disabled = false;
  plot();
  show(0);
}

$("files").addEventListener("change", (e) => load([...e.target.files]));
$("slider").addEventListener("input", (e) => show(Number(e.target.value)));
