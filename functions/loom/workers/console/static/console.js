// Loom console: the few things a server-rendered page cannot do alone. Every page works
// without this script (links open values as JSON, forms post, a reload shows news); with it:
// values held as blobs load in place, JSON copies to the clipboard, actions ask once before
// they are sent, times show the reader's local time beside UTC, the operator's name is
// remembered for the next form, and an open page follows the execution as it changes.
"use strict";

const NAME_KEY = "loom-console-name";
const POLL_MS = 2000;

document.addEventListener("click", async (event) => {
  const link = event.target.closest("a.fetch");
  if (!link) return;
  event.preventDefault();
  const out = link.parentElement.querySelector("pre.fetched");
  out.textContent = "loading…";
  try {
    const response = await fetch(link.href, { credentials: "same-origin" });
    const text = await response.text();
    out.textContent = response.ok ? text : `error ${response.status}`;
    out.classList.toggle("err", !response.ok);
  } catch (error) {
    out.textContent = `error: ${error}`;
    out.classList.add("err");
  }
});

async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch (_) { /* denied: fall back below */ }
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  const done = document.execCommand("copy");
  area.remove();
  return done;
}

document.addEventListener("click", async (event) => {
  const button = event.target.closest("button.copy");
  if (!button) return;
  const pre = button.closest(".json-value").querySelector("pre");
  const done = await copyText(pre.textContent);
  button.textContent = done ? "copied" : "copy failed";
  button.dataset.copied = done ? "yes" : "no";
  setTimeout(() => { button.textContent = "copy"; }, 2000);
});

// An action changes the execution for good: ask once before sending it.
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form.matches("form.confirm") && !window.confirm(form.dataset.confirm || "Are you sure?")) {
    event.preventDefault();
    return;
  }
  const name = form.querySelector("input.remember-name");
  if (name && name.value.trim()) {
    try { localStorage.setItem(NAME_KEY, name.value.trim()); } catch (_) { /* private mode */ }
  }
});

function fillNames() {
  let name = "";
  try { name = localStorage.getItem(NAME_KEY) || ""; } catch (_) { return; }
  for (const input of document.querySelectorAll("input.remember-name")) {
    if (!input.value) input.value = name;
  }
}

function two(n) { return String(n).padStart(2, "0"); }

function localTimes() {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local";
  for (const time of document.querySelectorAll("time[datetime]")) {
    if (time.nextElementSibling && time.nextElementSibling.classList.contains("local")) continue;
    const at = new Date(time.getAttribute("datetime"));
    if (isNaN(at) || at.getTimezoneOffset() === 0) continue; // local is UTC: said once
    const text = `${at.getFullYear()}-${two(at.getMonth() + 1)}-${two(at.getDate())} ` +
      `${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())}`;
    const local = document.createElement("span");
    local.className = "local";
    local.textContent = ` (${text} ${zone})`;
    local.title = "your local time";
    time.title = "UTC";
    time.after(local);
  }
}

// Live updates: poll what the page was drawn from (an execution's last seq and status, a
// list's counts) and reload when it changed, unless the operator is filling in a form.
function editing() {
  const active = document.activeElement;
  if (active && active.form && active.matches("input, textarea, select")) return true;
  for (const field of document.querySelectorAll("form[method=post] textarea, form[method=post] input[type=text]")) {
    if (field.value && !field.classList.contains("remember-name")) return true;
  }
  return false;
}

function follow() {
  const url = document.body.dataset.live;
  if (!url) return;
  let seen = document.body.dataset.liveToken || null;
  const stale = document.getElementById("stale");
  const tick = async () => {
    if (document.visibilityState === "hidden") return;
    try {
      const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (!response.ok) return;
      const { token } = await response.json();
      if (seen === null) { seen = token; return; }
      if (token === seen) return;
      if (editing()) { stale.hidden = false; return; }
      window.location.reload();
    } catch (_) { /* the worker is away: try again next tick */ }
  };
  document.body.dataset.following = "yes";
  tick();
  setInterval(tick, POLL_MS);
}

fillNames();
localTimes();
follow();
