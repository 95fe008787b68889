// Owns: whether the page can reach its server. api.js reports each request and stream as
// reached() or lost(); while lost, the header says so (#conn, a live region) and a probe
// fetches the static favicon (no login needed) with a backoff until the server answers again.
// Views subscribe with onConnection(fn(online)) to show their own state (a conversation stops
// claiming "running" and its streaming cursor stops). Does not: reconnect streams (api.js).

import { setText } from "./dom.js";

const listeners = new Set();
let online = true;
let probe = null;
let delay = 500;

export function isOnline() { return online; }

/** fn(online: boolean) on every change; returns the unsubscribe function. */
export function onConnection(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function announce() {
  const banner = document.getElementById("conn");
  if (banner) setText(banner, online ? "" : "Connection lost — reconnecting…");
  document.documentElement.classList.toggle("offline", !online);
  for (const fn of [...listeners]) fn(online);
}

export function reached() {
  delay = 500;
  clearTimeout(probe);
  probe = null;
  if (online) return;
  online = true;
  announce();
}

export function lost() {
  if (!online) return;
  online = false;
  announce();
  schedule();
}

function schedule() {
  clearTimeout(probe);
  probe = setTimeout(async () => {
    try {
      const r = await fetch("/favicon.svg", { cache: "no-store" });
      if (r.ok) { reached(); return; }
    } catch (_) { /* still down */ }
    delay = Math.min(delay * 2, 5000);
    if (!online) schedule();
  }, delay);
}
