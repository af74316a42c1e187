// Helpers shared by the live dashboard (dashboard.js) and the replay (replay.js); loaded first by both pages.
"use strict";

const $ = (id) => document.getElementById(id);

// The token came in the address once; the page's cookie carries it from now on: keep it out of the history.
if (new URLSearchParams(location.search).has("token")) history.replaceState(null, "", location.pathname);

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k === "style") e.style.cssText = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// A stable colour per job id (the same job keeps its colour across rounds, reloads and the replay).
function colour(id) {
  let h = 2166136261;
  for (const ch of id) { h ^= ch.charCodeAt(0); h = Math.imul(h, 16777619); }
  h ^= h >>> 13; h = Math.imul(h, 0x5bd1e995); h ^= h >>> 15;  // spread ids that differ in one digit
  const hue = ((h >>> 0) * 137.508) % 360, light = 38 + ((h >>> 9) % 3) * 7;  // golden-angle hues
  return `hsl(${hue.toFixed(0)} 60% ${light}%)`;
}

function num(x, digits = 0) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return Number(x).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function duration(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "–";
  if (s < 120) return `${num(s)} s`;
  if (s < 7200) return `${num(s / 60, 1)} min`;
  return `${num(s / 3600, 1)} h`;
}
