// Owns: the sessions list, kept live from /api/events (R-SRV-9): each session by its title or
// first prompt, most recently active first, with the one status (R-SET-5), turns, tokens and
// estimated cost; a search box (titles and first prompts at once, the traces' full text through
// /api/search when the server has it); archive (with a confirmation) and the Archived view
// with Unarchive — the mark is a session_archived record in the trace, POST
// /api/sessions/{id}/archive; delete with a confirmation; and the new-session form (R-WEB-1).
import { api, enc, openStream } from "./api.js";
import { clear, fmtNum, fmtTime, h, setText, visible } from "./dom.js";
import { costNode } from "./cost.js";

const COLUMNS = ["Session", "Status", "Last activity", "Turns", "Tokens", "Cost", ""];

export function sessionsView(root) {
  const tbody = h("tbody");
  const error = h("p", { class: "error", hidden: true });
  const form = newSessionForm(error);
  const search = h("input", {
    type: "search", class: "session-search", placeholder: "Search sessions…",
    "aria-label": "Search sessions (titles, first prompts and the conversations' text)",
  });
  const found = h("div", { class: "search-results", "aria-live": "polite" });
  const count = h("span", { class: "muted small count" });
  const dialog = confirmDialog();
  // Which sessions the list shows: the others, or the archived ones (?archived=true).
  let archivedView = false;
  const heading = h("h2", null, "Sessions");
  const tabs = ["Sessions", "Archived"].map((text, i) => h("button", {
    type: "button", class: `view-tab${i ? " view-archived" : " view-active"}`,
    "aria-pressed": i ? "false" : "true",
    onclick: () => showArchived(Boolean(i)),
  }, text));
  root.append(
    h("section", { class: "card" }, h("h2", null, "New session"), form, error),
    h("section", { class: "card sessions-card" },
      h("div", { class: "list-head" }, heading, count,
        h("div", { class: "view-tabs", role: "group", "aria-label": "Sessions to list" }, tabs),
        search),
      found,
      h("table", { class: "sessions" },
        h("thead", null, h("tr", null, COLUMNS.map((t) => h("th", { scope: "col" }, t)))),
        tbody)),
    dialog.el,
  );
  let timer = null;
  let rows = [];
  let capped = false;
  const live = new Map();  // id -> {status, last_active} from the event stream

  function draw() {
    const q = search.value.trim().toLowerCase();
    const shown = q ? rows.filter((r) => matches(r, q)) : rows;
    clear(tbody);
    for (const row of shown) tbody.append(sessionRow(row, live.get(row.id), { remove, archive }));
    if (!rows.length) {
      tbody.append(h("tr", { class: "empty" }, h("td", { colspan: COLUMNS.length, class: "muted" },
        archivedView
          ? "No archived sessions. Archive one from the Sessions list: it moves here, nothing is deleted, and Unarchive brings it back."
          : "No sessions yet. Create one above: choose a workspace (or keep the default) and press Create session.")));
    } else if (!shown.length) {
      tbody.append(h("tr", { class: "empty" }, h("td", { colspan: COLUMNS.length, class: "muted" }, "No session title or first prompt matches.")));
    }
    setText(count, (q ? `${shown.length} of ${rows.length}` : `${rows.length}`)
      + (archivedView ? " archived" : "")
      + (capped ? " most recent (search finds older ones)" : ""));
  }
  function showArchived(on) {
    if (on === archivedView) return;
    archivedView = on;
    tabs.forEach((t, i) => t.setAttribute("aria-pressed", String(Boolean(i) === on)));
    setText(heading, on ? "Archived sessions" : "Sessions");
    rows = [];
    draw();
    load();
  }
  async function load() {
    const view = archivedView;
    try {
      const data = await api(`/api/sessions?limit=1000${view ? "&archived=true" : ""}`);
      if (view !== archivedView) return;  // the other view was chosen meanwhile
      rows = data.sessions;
      // The most recent 1,000 (the API's page); the full-text search reaches the older ones.
      capped = data.next_cursor !== null && data.next_cursor !== undefined;
      draw();
    } catch (err) {
      error.hidden = false;
      setText(error, err.message);
    }
  }
  async function archive(row, on) {
    const name = label(row);
    // Archiving asks first (it takes the session off this list); unarchiving does not.
    if (on && !(await dialog.ask(`Archive “${name}”?`,
      "The session leaves this list and waits under Archived, where Unarchive brings it back. Nothing is deleted: its trace stays where it is.",
      "Archive session", { danger: false }))) return;
    try {
      await api(`/api/sessions/${enc(row.id)}/archive`, { method: "POST", body: { archived: on } });
      rows = rows.filter((r) => r.id !== row.id);
      draw();
    } catch (err) {
      error.hidden = false;
      setText(error, `${err.code}: ${err.message}`);
    }
  }
  async function remove(row) {
    const name = label(row);
    const ok = await dialog.ask(`Delete “${name}”?`,
      `This deletes the session's trace files (${row.files ?? 0} file${row.files === 1 ? "" : "s"}, ${fmtNum(row.turns)} turns) from the data root. It cannot be undone.`,
      "Delete session");
    if (!ok) return;
    try {
      await api(`/api/sessions/${enc(row.id)}`, { method: "DELETE" });
      rows = rows.filter((r) => r.id !== row.id);
      draw();
    } catch (err) {
      error.hidden = false;
      setText(error, `${err.code}: ${err.message}`);
    }
  }
  const reload = () => { clearTimeout(timer); timer = setTimeout(load, 150); };
  const fulltext = fullTextSearch(found);
  search.addEventListener("input", () => { draw(); fulltext.query(search.value.trim()); });
  const source = openStream("/api/events", {
    // Once subscribed, list again: a session created before the subscription is not missed.
    onOpen: reload,
    onServer: (ev) => {
      if (ev.type === "session_state") {
        // The one status (R-SET-5): running, awaiting_approval, compacting, or how the
        // last run ended (completed, interrupted, ...).
        live.set(ev.id, { status: ev.status || ev.state, last_active: ev.last_active });
        const row = rows.find((r) => r.id === ev.id);
        if (row) {
          // Most recently active first: the session that just moved goes to the top.
          rows = [row, ...rows.filter((r) => r !== row)];
          if (ev.last_active) row.last_active = ev.last_active;
          draw();
        } else reload();
        if (ev.state === "idle") reload();
      } else if (ev.type === "session_created" || ev.type === "session_archived") reload();
    },
  });
  load();
  return { close() { source.close(); clearTimeout(timer); fulltext.close(); dialog.close(); } };
}

function label(row) {
  return row.title || firstLine(row.first_prompt) || row.id;
}

function firstLine(text) {
  if (!text) return "";
  const line = String(text).trim().split("\n")[0];
  return line.length > 120 ? `${line.slice(0, 119)}…` : line;
}

function matches(row, q) {
  return [row.title, row.first_prompt, row.id, row.model, row.workspace]
    .some((v) => v && String(v).toLowerCase().includes(q));
}

function sessionRow(row, liveState, { remove, archive }) {
  const state = (liveState && liveState.status) || row.status || row.state || "idle";
  const name = label(row);
  const untitled = !row.title && !row.first_prompt;
  return h("tr", { dataset: { id: row.id } },
    h("td", { class: "name", dataset: { label: "Session" } },
      h("a", { href: `#/s/${enc(row.id)}`, class: `title${untitled ? " untitled" : ""}` }, untitled ? "(no prompt yet)" : name),
      h("div", { class: "muted small id" }, row.id, row.model ? ` · ${row.model}` : "", row.subagent ? " · subagent" : "")),
    h("td", { class: "state", dataset: { state, label: "Status" } }, state.replace(/_/g, " ")),
    h("td", { class: "when", dataset: { label: "Last activity" }, title: fmtTime(row.last_active || row.created) },
      ago(row.last_active || row.created)),
    h("td", { class: "num", dataset: { label: "Turns" } }, String(row.turns ?? 0)),
    h("td", { class: "num tokens", dataset: { label: "Tokens" } }, fmtNum(row.tokens ?? 0)),
    h("td", { class: "num", dataset: { label: "Cost" } }, costNode(row.cost, row.unpriced_tokens)),
    h("td", { class: "actions" },
      // A session with nothing recorded yet (created, never run) has no trace to mark.
      row.archived
        ? h("button", { type: "button", class: "unarchive link", "aria-label": `Unarchive session ${name}`, onclick: () => archive(row, false) }, "Unarchive")
        : (row.files ? h("button", { type: "button", class: "archive link", "aria-label": `Archive session ${name}`, onclick: () => archive(row, true) }, "Archive") : null),
      h("button", { type: "button", class: "delete link danger-link", "aria-label": `Delete session ${name}`, onclick: () => remove(row) }, "Delete")),
  );
}

/** "3 min ago" (the exact time in the cell's title). */
export function ago(iso) {
  if (!iso) return "";
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return visible(iso);
  const s = Math.round((t - Date.now()) / 1000);
  const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  for (const [unit, size] of [["year", 31536000], ["month", 2592000], ["week", 604800], ["day", 86400], ["hour", 3600], ["minute", 60]]) {
    if (Math.abs(s) >= size) return rtf.format(Math.round(s / size), unit);
  }
  return Math.abs(s) < 10 ? "just now" : rtf.format(s, "second");
}

/** A modal confirmation (a <dialog>: focus stays in it, Escape cancels). ask() resolves true
 * when confirmed. */
function confirmDialog() {
  const title = h("h3", null);
  const text = h("p", null);
  const yes = h("button", { type: "button", class: "danger confirm-yes" });
  const no = h("button", { type: "button", class: "confirm-no" }, "Cancel");
  const el = h("dialog", { class: "confirm", "aria-labelledby": "confirm-title" },
    title, text, h("div", { class: "row" }, no, yes));
  title.id = "confirm-title";
  let settle = null;
  const done = (value) => { if (settle) { settle(value); settle = null; } if (el.open) el.close(); };
  yes.addEventListener("click", () => done(true));
  no.addEventListener("click", () => done(false));
  el.addEventListener("close", () => done(false));
  return {
    el,
    ask(heading, body, action, { danger = true } = {}) {
      setText(title, heading);
      setText(text, body);
      setText(yes, action);
      // Deleting is the red button; archiving (undone by Unarchive) is the ordinary one.
      yes.className = `${danger ? "danger" : "primary"} confirm-yes`;
      el.showModal();
      no.focus();
      return new Promise((resolve) => { settle = resolve; });
    },
    close() { done(false); },
  };
}

/** Full-text search over the traces through GET /api/search?q= (when the server has the
 * search index): matching sessions with a snippet, each a link to the session. */
function fullTextSearch(box) {
  let timer = null;
  let seq = 0;
  // Whether this server has the search index: its OpenAPI document lists every route.
  const available = api("/api/openapi.json").then((doc) => Boolean(doc.paths && doc.paths["/api/search"]), () => false);
  async function run(q) {
    const mine = ++seq;
    if (!(await available)) {
      if (mine === seq) clear(box).append(h("p", { class: "muted small" }, "Full-text search is not available on this server: the list shows the sessions whose title or first prompt matches."));
      return;
    }
    let data;
    try {
      data = await api(`/api/search?q=${enc(q)}&limit=20`);
    } catch (err) {
      if (mine === seq) clear(box).append(h("p", { class: "error" }, `${err.code}: ${err.message}`));
      return;
    }
    if (mine !== seq) return;
    const hits = data.hits || [];
    clear(box);
    if (!hits.length) { box.append(h("p", { class: "muted small" }, `No text in any conversation matches “${q}”.`)); return; }
    box.append(h("h3", null, `In the conversations (${hits.length})`),
      h("ol", { class: "hits" }, hits.map((hit) => {
        const sid = hit.session_id;
        // The snippet is plain text; the matched words are marked (text nodes only).
        const snippet = h("div", { class: "snippet small" },
          (hit.snippet || []).map((seg) => (seg.match ? h("mark", null, seg.text) : seg.text)));
        return h("li", { dataset: { id: sid } },
          h("a", { href: `#/s/${enc(sid)}` }, hit.title || sid),
          " ", h("span", { class: "muted small" }, `${hit.kind.replace("_", " ")} · ${hit.matches} match${hit.matches === 1 ? "" : "es"} · ${ago(hit.time || hit.active)}${hit.archived ? " · archived" : ""}`),
          hit.at ? h("a", { class: "small at", href: `#/s/${enc(sid)}/trace`, title: `record ${hit.at}` }, ` ${hit.at}`) : null,
          snippet);
      })));
  }
  return {
    query(q) {
      clearTimeout(timer);
      if (!q) { seq += 1; clear(box); return; }
      timer = setTimeout(() => run(q), 250);
    },
    close() { clearTimeout(timer); seq += 1; },
  };
}

function newSessionForm(error) {
  const workspace = h("input", { name: "workspace", placeholder: "default workspace", size: 30 });
  const approval = h("select", { name: "approval" },
    ["ask", "allow-all", "deny-all"].map((v) => h("option", { value: v }, v)));
  // SPEC §25: the tools' sandbox; "off" must be chosen, and then the network is on unless unticked.
  const sandbox = h("select", { name: "sandbox" },
    ["workspace-write", "read-only", "off"].map((v) => h("option", { value: v }, v)));
  const network = h("input", { type: "checkbox", name: "network" });
  // SPEC §11: the run_subagent tool, off unless ticked (a subagent runs the model again).
  const subagents = h("input", { type: "checkbox", name: "subagents" });
  const prompt = h("textarea", { name: "system_prompt", rows: 2, placeholder: "system prompt (optional)" });
  // MCP servers for this session (docs/mcp.md): a JSON object of name -> {} (a server of the
  // server's config.toml) or {"url": ...}; empty: the configured servers.
  const mcp = h("textarea", {
    name: "mcp", rows: 2, spellcheck: "false",
    placeholder: 'MCP servers (optional JSON; default: those of config.toml), e.g. {"fs": {}} or {"docs": {"url": "…/mcp"}} (a URL on this machine)',
  });
  return h("form", {
    class: "new-session",
    onsubmit: async (ev) => {
      ev.preventDefault();
      error.hidden = true;
      const body = { approval: approval.value, sandbox: sandbox.value };
      if (network.checked || sandbox.value !== "off") body.network = network.checked;
      body.subagents = subagents.checked;
      if (workspace.value.trim()) body.workspace = workspace.value.trim();
      if (prompt.value.trim()) body.system_prompt = prompt.value;
      if (mcp.value.trim()) {
        try {
          body.mcp = JSON.parse(mcp.value);
        } catch (err) {
          error.hidden = false;
          setText(error, `MCP servers: not valid JSON (${err.message})`);
          return;
        }
      }
      try {
        const row = await api("/api/sessions", { method: "POST", body });
        location.hash = `#/s/${encodeURIComponent(row.id)}`;
      } catch (err) {
        error.hidden = false;
        setText(error, `${err.code}: ${err.message}`);
      }
    },
  },
  h("label", null, "Workspace ", workspace),
  h("label", null, "Approval ", approval),
  h("label", null, "Sandbox ", sandbox),
  h("label", null, network, " Network"),
  h("label", { title: "Offer the run_subagent tool: the agent may delegate a task to a child session with the same model, workspace and approval mode; its text streams under the call" }, subagents, " Subagents"),
  h("label", { class: "wide" }, "System prompt ", prompt),
  h("label", { class: "wide" }, "MCP servers ", mcp),
  h("button", { type: "submit", class: "primary" }, "Create session"));
}
