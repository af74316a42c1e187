// The optsched dashboard: renders the session's view, pushed by the server as
// server-sent events (GET /dashboard/{sid}/events; the token travels in the
// cookie the page set). No framework, no build step, no network beyond this server.
"use strict";

const SID = document.body.dataset.session;
const MAX_ROUNDS = 200;   // rows kept in the rounds table
const MAX_USAGE = 120;    // points kept in the utilization plot
const state = { rounds: new Map(), usage: [], lastRound: -1 };
window.optschedDashboard = state;  // for tests and the curious: the last view and counts
state.views = 0;

function renderHeader(v) {
  $("round").textContent = v.round;
  $("time").textContent = duration(v.time);
  $("policy").textContent = v.policy;
  $("active").textContent = v.jobs.length;
  $("finished").textContent = v.finished_jobs;
}

function renderCluster(v) {
  const onGpu = new Map();  // "server/gpu" -> job id
  for (const j of v.jobs) for (const g of j.gpus || []) onGpu.set(`${g.server}/${g.gpu}`, j.id);
  const lr = v.last_round || {};
  const started = new Set(lr.started || []), migrated = new Set(lr.migrated || []);
  const box = $("cluster");
  box.replaceChildren();
  for (const s of v.servers) {
    const gpus = el("div", { class: "gpus" });
    for (let i = 0; i < s.gpus; i++) {
      const job = onGpu.get(`${s.id}/${i}`);
      const cell = el("div", { class: "gpu" + (job ? "" : " free"), "data-server": s.id, "data-gpu": i,
                               "data-job": job || "", title: `${s.id} GPU ${i} (${s.gpu_type}): ${job || "free"}` },
                      job || s.gpu_type);
      if (job) {
        cell.style.background = colour(job);
        if (migrated.has(job)) cell.classList.add("flash-migrated");
        else if (started.has(job)) cell.classList.add("flash-started");
      }
      gpus.append(cell);
    }
    box.append(el("div", { class: "server" }, el("div", { class: "name" }, `${s.id} · ${s.gpu_type}`), gpus));
  }
}

function renderUsage(v) {
  const cap = {}, used = {};
  for (const s of v.servers) cap[s.gpu_type] = (cap[s.gpu_type] || 0) + s.gpus;
  for (const t in cap) used[t] = 0;
  for (const j of v.jobs) for (const g of j.gpus || []) used[g.gpu_type] = (used[g.gpu_type] || 0) + 1;
  if (v.round !== state.usageRound) {
    state.usage.push({ round: v.round, used: { ...used } });
    if (state.usage.length > MAX_USAGE) state.usage.shift();
    state.usageRound = v.round;
  } else state.usage[state.usage.length - 1] = { round: v.round, used: { ...used } };
  const types = Object.keys(cap);
  const box = $("usage");
  box.replaceChildren(el("div", {}, "In use: " + types.map((t) => `${t} ${used[t]}/${cap[t]}`).join(" · ")));
  // One line per GPU type: the fraction in use, round by round.
  const W = 360, H = 60, n = state.usage.length;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("aria-label", "utilization by GPU type");
  types.forEach((t) => {
    const pts = state.usage.map((u, i) => {
      const x = n > 1 ? (i / (n - 1)) * (W - 4) + 2 : W / 2;
      const y = H - 2 - ((u.used[t] || 0) / cap[t]) * (H - 4);
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", pts.join(" ")); line.setAttribute("fill", "none");
    line.setAttribute("stroke", colour("type:" + t)); line.setAttribute("stroke-width", "1.5");
    const title = document.createElementNS(ns, "title"); title.textContent = t; line.append(title);
    svg.append(line);
  });
  box.append(svg, el("div", {}, ...types.map((t) => el("span", { style: "margin-right:10px" },
    el("span", { class: "swatch", style: `background:${colour("type:" + t)}` }), t))));
}

function shareCell(j, shareVsFair) {
  if (j.share === null || j.share === undefined) return el("td", {}, "not in the last solve");
  const bar = el("span", { class: "bar", title: `share ${num(j.share, 2)}, equal share ${num(j.fair_share, 2)}` },
                 el("i", { style: `width:${Math.min(1, j.share) * 100}%` }));
  if (j.fair_share !== null) bar.append(el("b", { style: `left:${Math.min(1, j.fair_share) * 100}%` }));
  const ratio = shareVsFair && j.id in shareVsFair ? ` (${num(shareVsFair[j.id], 2)}× fair)` : "";
  return el("td", {}, bar, ` ${num(j.share, 2)} / ${num(j.fair_share, 2)}${ratio}`);
}

function queuedReason(j, v, bottleneck) {
  const a = v.allocation;
  if (!a) return "not yet admitted: no solve yet";
  if (j.share === null || j.share === undefined) return "arrived after the last solve";
  if (bottleneck.has(j.id)) return "bottleneck job: waits for its turn in the rotation";
  return "its share is served in other rounds";
}

function renderJobs(v) {
  const ex = (v.allocation && v.allocation.explanation) || {};
  const bottleneck = new Set(ex.bottleneck_jobs || []);
  const body = $("jobs").tBodies[0];
  body.replaceChildren();
  const jobs = [...v.jobs].sort((a, b) => (a.status === b.status ? 0 : a.status === "running" ? -1 : 1));
  for (const j of jobs) {
    const types = [...new Set((j.gpus || []).map((g) => g.gpu_type))].join("+");
    const status = el("td", { class: `status-${j.status}` }, j.status);
    if (j.status !== "running") status.append(el("div", { class: "reason" }, queuedReason(j, v, bottleneck)));
    body.append(el("tr", { "data-job": j.id },
      el("td", {}, el("span", { class: "swatch", style: `background:${colour(j.id)}` }), j.id,
         bottleneck.has(j.id) ? " *" : ""),
      status,
      el("td", {}, j.gpus && j.gpus.length ? `${j.gpus.length}× ${types}` : `– (needs ${j.scale_factor})`),
      shareCell(j, ex.share_vs_fair),
      el("td", {}, `${num(j.attained_service / 3600, 2)} GPU-h`),
      el("td", {}, j.steps_total ? `${num(j.steps_done)} / ${num(j.steps_total)} (${num(100 * j.steps_done / j.steps_total)} %)`
                                 : num(j.steps_done)),
      el("td", {}, duration(j.waiting)),
      el("td", {}, j.preemptions)));
  }
}

function tags(ids, cls) {
  const td = el("td", { class: "list" });
  for (const id of ids || []) td.append(el("span", { class: `tag ${cls}` }, id));
  return td;
}

function renderRounds() {
  const body = $("rounds").tBodies[0];
  body.replaceChildren();
  const rows = [...state.rounds.values()].sort((a, b) => b.round - a.round);
  for (const r of rows) {
    body.append(el("tr", { "data-round": r.round },
      el("td", {}, r.round), el("td", {}, duration(r.time)),
      tags(r.started, "start"), tags(r.preempted, "pre"), tags(r.migrated, "mig"),
      el("td", {}, r.recomputed ? "yes" : "no"),
      el("td", {}, r.solve_seconds === undefined || r.solve_seconds === null ? "–" : `${num(r.solve_seconds * 1000, 1)} ms`)));
  }
}

function addRound(r) {
  if (!r) return;
  const old = state.rounds.get(r.round) || {};
  state.rounds.set(r.round, { ...old, ...r });
  while (state.rounds.size > MAX_ROUNDS) state.rounds.delete(Math.min(...state.rounds.keys()));
}

// The last solve in words: what it optimized, what each GPU type is worth, who limits whom.
function renderExplanation(v) {
  const box = $("explanation");
  const a = v.allocation;
  if (!a) { box.textContent = "No solve yet: the allocation is computed at the first round."; return; }
  const ex = a.explanation || {};
  const p = [];
  p.push(`The ${a.policy} policy's last solve was ${a.status}` +
         (a.solve_seconds !== null && a.solve_seconds !== undefined ? ` in ${num(a.solve_seconds * 1000, 1)} ms` : "") +
         (a.objective !== null && a.objective !== undefined ? `, objective ${num(a.objective, 4)}.` : "."));
  const cap = ex.capacity || {}, used = ex.capacity_used || {}, price = ex.gpu_price || {};
  const types = Object.keys(cap).length ? Object.keys(cap) : Object.keys(used);
  if (types.length) {
    p.push("Capacity: " + types.map((t) => `${t} ${num(used[t], 1)} of ${num(cap[t])} GPUs used` +
      (t in price ? (price[t] > 1e-6 ? ` (scarce: price ${Number(price[t]).toPrecision(3)})` : " (price 0)") : "")).join("; ") + ".");
    const scarce = types.filter((t) => (price[t] || 0) > 1e-6);
    if (Object.keys(price).length) {
      p.push(scarce.length ? `Giving a job more ${scarce.join(" or ")} time would take it from another job: these types limit the objective.`
                           : "Every capacity price is 0: more GPUs of any one type would not raise the objective.");
    }
  }
  const b = ex.bottleneck_jobs || [];
  if (b.length) p.push(`Bottleneck jobs (their share cannot rise without lowering another's): ${b.slice(0, 12).join(", ")}` +
                       (b.length > 12 ? ` and ${b.length - 12} more.` : "."));
  if (ex.utilization && ex.utilization.total !== undefined && ex.utilization.total !== null)
    p.push(`Utilization of the GPUs jobs can use: ${num(100 * ex.utilization.total, 1)} %.`);
  if (ex.job_classes) p.push(`Solved over ${ex.job_classes} job classes (jobs alike are solved as one).`);
  const lr = v.last_round;
  if (lr && lr.note) p.push(`Placement: ${lr.note}`);
  box.replaceChildren(...p.map((t) => el("p", {}, t)));
}

function render(v) {
  state.view = v;
  state.views += 1;
  if (v.rounds) for (const r of v.rounds) addRound(r);
  if (v.last_round) addRound(v.last_round);
  renderHeader(v);
  renderCluster(v);
  renderUsage(v);
  renderJobs(v);
  renderExplanation(v);
  renderRounds();
  document.body.dataset.round = v.round;
  document.body.dataset.version = v.version;
  if (v.ended && !state.ended) ended(v.ended);  // connected after the run ended (optsched run --dashboard)
}

// Why the stream ended, in words (the server's "ended" event, or a 404 when the page reconnects).
const ENDED = {
  deleted: "This session was deleted: the page shows its last state.",
  finished: "The run is over: the page shows its last state.",
  interrupted: "The run was interrupted: the page shows its last state.",
  max_time: "The run reached its --max-time: the page shows its last state.",
  stopped: "The scheduler stopped: the page shows its last state.",
};

function ended(info) {
  state.ended = info;
  const status = $("status");
  status.textContent = info.reason === "deleted" ? "deleted" : "ended";
  status.className = "pill down";
  const note = $("ended");
  note.textContent = (ENDED[info.reason] || `Ended: ${info.reason}.`) + (info.detail ? ` ${info.detail}` : "");
  note.hidden = false;
  document.body.dataset.ended = info.reason;
}

function connect() {
  const status = $("status");
  const source = new EventSource(`/dashboard/${encodeURIComponent(SID)}/events`);
  source.addEventListener("open", () => { status.textContent = "live"; status.className = "pill live"; });
  source.addEventListener("view", (e) => {
    const v = JSON.parse(e.data);
    if (state.view && v.version < state.view.version) return;  // an older view overtaken by a newer one
    render(v);
  });
  source.addEventListener("ended", (e) => { source.close(); ended(JSON.parse(e.data)); });
  // EventSource reconnects by itself (and then gets a fresh whole view), unless the session is gone.
  source.addEventListener("error", () => {
    if (state.ended) return;
    status.textContent = "reconnecting…"; status.className = "pill down";
    fetch(`/dashboard/${encodeURIComponent(SID)}/view`, { cache: "no-store" }).then((r) => {
      if (r.status === 404 && !state.ended) { source.close(); ended({ reason: "deleted" }); }
    }).catch(() => {});  // the server is unreachable: EventSource keeps trying
  });
}

connect();
