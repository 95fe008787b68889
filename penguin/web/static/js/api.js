// Owns: talking to the §19 API (JSON over fetch with the login cookie, SSE via EventSource) and
// the login flow: the token from `/#token=...` is posted to /api/login, then removed from the
// address bar (R-SRV-1, R-WEB-5).

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function api(path, { method = "GET", body } = {}) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
  if (!response.ok) {
    const err = data && data.error ? data.error : { code: "http_" + response.status, message: text };
    if (response.status === 401) window.dispatchEvent(new CustomEvent("penguin:unauthorized"));
    throw new ApiError(response.status, err.code, err.message);
  }
  return data;
}

export const enc = encodeURIComponent;

/** Post the token of a login URL, then drop it from the address bar (and history). */
export async function loginFromFragment() {
  const match = location.hash.match(/^#token=([^&]*)/);
  if (!match) return false;
  const token = decodeURIComponent(match[1]);
  history.replaceState(null, "", location.pathname + "#/");
  await api("/api/login", { method: "POST", body: { token } });
  return true;
}

/** An EventSource with JSON handlers; `server` events go to onServer. */
export function openStream(url, { onMessage, onServer, onOpen, onError }) {
  const source = new EventSource(url);
  source.onmessage = (ev) => onMessage && onMessage(JSON.parse(ev.data), ev.lastEventId);
  source.addEventListener("server", (ev) => onServer && onServer(JSON.parse(ev.data)));
  source.onopen = () => onOpen && onOpen();
  source.onerror = () => onError && onError(source);
  return source;
}
