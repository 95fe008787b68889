// Owns: talking to the §19 API (JSON over fetch, SSE read from a fetch body, authenticated
// images) and the login flow: the token from `/#token=...` is posted to /api/login, then
// removed from the address bar (R-SRV-1, R-WEB-5).
//
// A login is a server-side session: an HttpOnly cookie named for this server's port plus a key
// kept in this origin's localStorage and sent as X-Penguin-Key on every request. Browsers send
// cookies to every port of a host; localStorage is per origin, so another app on another port
// never gets what it takes to authenticate (issue 29). That is why streams and images are
// fetched (which can carry the header) instead of EventSource and plain <img src>.

import { lost, reached } from "./connection.js";

const KEY = "penguin.key";

function authHeaders() {
  const key = localStorage.getItem(KEY);
  return key ? { "x-penguin-key": key } : {};
}

function unauthorized() {
  localStorage.removeItem(KEY);
  window.dispatchEvent(new CustomEvent("penguin:unauthorized"));
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function api(path, { method = "GET", body } = {}) {
  const init = { method, credentials: "same-origin", headers: authHeaders() };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    // The server is unreachable (not an HTTP error): say so instead of "Failed to fetch".
    lost();
    throw new ApiError(0, "offline", "Not connected to the server — reconnecting; try again when it is back.");
  }
  reached();
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
  if (!response.ok) {
    const err = data && data.error ? data.error : { code: "http_" + response.status, message: text };
    if (response.status === 401 && path !== "/api/login") unauthorized();
    throw new ApiError(response.status, err.code, err.message);
  }
  return data;
}

export const enc = encodeURIComponent;

/** Post the token of a login URL, keep the login's key, then drop the token from the address
 * bar (and history). */
export async function loginFromFragment() {
  const match = location.hash.match(/^#token=([^&]*)/);
  if (!match) return false;
  const token = decodeURIComponent(match[1]);
  history.replaceState(null, "", location.pathname + "#/");
  const grant = await api("/api/login", { method: "POST", body: { token } });
  localStorage.setItem(KEY, grant.key);
  return true;
}

/** End this browser's login on the server, then forget its key. */
export async function logout() {
  try { await api("/api/logout", { method: "POST" }); } finally { unauthorized(); }
}

/** An authenticated image: fetched with the login's key, shown from a blob URL. Data URLs
 * (pasted images) are shown as they are. */
export function authImage(img, url) {
  if (!url.startsWith("/api/")) { img.src = url; return img; }
  fetch(url, { credentials: "same-origin", headers: authHeaders() })
    .then((r) => (r.ok ? r.blob() : Promise.reject(new Error(`HTTP ${r.status}`))))
    .then((blob) => {
      const objectUrl = URL.createObjectURL(blob);
      img.addEventListener("load", () => URL.revokeObjectURL(objectUrl), { once: true });
      img.src = objectUrl;
    })
    .catch(() => img.classList.add("broken"));
  return img;
}

/** A Server-Sent Events stream read from a fetch response (so it carries the login's key),
 * reconnecting with Last-Event-ID like EventSource; `server` events go to onServer. A stream
 * that breaks or ends reports the connection lost (connection.js) until it opens again;
 * onDrop() is called then. Returns {close()}. */
export function openStream(url, { onMessage, onServer, onOpen, onError, onDrop }) {
  let lastId = null;
  let closed = false;
  let controller = null;
  let delay = 500;

  function dispatch(event, data, id) {
    if (id !== null) lastId = id;
    if (!data.length) return;
    const value = JSON.parse(data.join("\n"));
    if (event === "server") { if (onServer) onServer(value); } else if (onMessage) onMessage(value, id ?? lastId ?? "");
  }

  async function once() {
    controller = new AbortController();
    const headers = authHeaders();
    if (lastId !== null) headers["last-event-id"] = lastId;
    let response;
    try {
      response = await fetch(url, { credentials: "same-origin", headers, signal: controller.signal, cache: "no-store" });
    } catch (err) {
      if (!closed) dropped();
      throw err;
    }
    if (response.status === 401) { closed = true; unauthorized(); return; }
    if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
    delay = 500;
    reached();
    live = true;
    if (onOpen) onOpen();
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let event = null, data = [], id = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let nl;
      while ((nl = buffer.search(/\r\n|\r|\n/)) >= 0) {
        if (buffer[nl] === "\r" && nl === buffer.length - 1) break;  // maybe half of \r\n
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + (buffer.startsWith("\r\n", nl) ? 2 : 1));
        if (line === "") { dispatch(event, data, id); event = null; data = []; id = null; continue; }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "data") data.push(val);
        else if (field === "event") event = val;
        else if (field === "id") id = val;
      }
    }
  }

  let live = false;
  function dropped() {
    lost();
    if (live && onDrop) onDrop();
    live = false;
  }

  (async () => {
    while (!closed) {
      try { await once(); } catch (_) { if (closed) return; if (onError) onError(); }
      if (closed) return;
      if (live) dropped();  // the open stream broke or ended: the server went away
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 5000);
    }
  })();

  return { close() { closed = true; if (controller) controller.abort(); } };
}
