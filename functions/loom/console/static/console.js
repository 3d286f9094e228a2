// Loom console: fetch a value stored as a blob into its <details> when the operator asks.
// Without this script the link opens the value as plain text, which works as well.
"use strict";
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
// Cancelling cannot be undone: ask once before sending it.
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form.matches("form.cancel") && !window.confirm("Cancel this execution?")) {
    event.preventDefault();
  }
});
