// Owns: the sessions list, kept live from /api/events (R-SRV-9), and the new-session form
// (R-WEB-1).
import { api, openStream } from "./api.js";
import { clear, fmtTime, h, setText } from "./dom.js";

export function sessionsView(root) {
  const tbody = h("tbody");
  const error = h("p", { class: "error", hidden: true });
  const form = newSessionForm(error);
  root.append(
    h("section", { class: "card" }, h("h2", null, "New session"), form, error),
    h("section", { class: "card" },
      h("h2", null, "Sessions"),
      h("table", { class: "sessions" },
        h("thead", null, h("tr", null, ["Title", "State", "Last activity", "Turns", "Agent"].map((t) => h("th", null, t)))),
        tbody)),
  );
  let timer = null;
  const states = new Map();
  async function load() {
    try {
      const data = await api("/api/sessions?limit=200");
      clear(tbody);
      for (const row of data.sessions) tbody.append(sessionRow(row, states.get(row.id)));
      if (!data.sessions.length) tbody.append(h("tr", null, h("td", { colspan: 5, class: "muted" }, "No sessions yet.")));
    } catch (err) {
      error.hidden = false;
      setText(error, err.message);
    }
  }
  const reload = () => { clearTimeout(timer); timer = setTimeout(load, 150); };
  const source = openStream("/api/events", {
    // Once subscribed, list again: a session created before the subscription is not missed.
    onOpen: reload,
    onServer: (ev) => {
      if (ev.type === "session_state") {
        // The one status (R-SET-5): running, awaiting_approval, compacting, or how the
        // last run ended (completed, interrupted, ...).
        const shown = ev.status || ev.state;
        states.set(ev.id, shown);
        const cell = tbody.querySelector(`tr[data-id="${CSS.escape(ev.id)}"] .state`);
        if (cell) { setText(cell, shown); cell.dataset.state = shown; } else reload();
        if (ev.state === "idle") reload();
      } else if (ev.type === "session_created") reload();
    },
  });
  load();
  return { close() { source.close(); clearTimeout(timer); } };
}

function sessionRow(row, liveState) {
  const state = liveState || row.status || row.state || "idle";
  const title = row.title || row.id;
  return h("tr", { dataset: { id: row.id } },
    h("td", null, h("a", { href: `#/s/${encodeURIComponent(row.id)}`, class: "title" }, title),
      row.title ? h("div", { class: "muted small" }, row.id) : null),
    h("td", { class: "state", dataset: { state } }, state),
    h("td", null, fmtTime(row.last_active || row.updated || row.created)),
    h("td", null, String(row.turns ?? 0)),
    h("td", { class: "muted" }, `${row.project ?? ""}/${row.agent ?? ""}`),
  );
}

function newSessionForm(error) {
  const workspace = h("input", { name: "workspace", placeholder: "default workspace", size: 30 });
  const approval = h("select", { name: "approval" },
    ["ask", "allow-all", "deny-all"].map((v) => h("option", { value: v }, v)));
  // SPEC §25: the tools' sandbox; "off" must be chosen, and then the network is on unless unticked.
  const sandbox = h("select", { name: "sandbox" },
    ["workspace-write", "read-only", "off"].map((v) => h("option", { value: v }, v)));
  const network = h("input", { type: "checkbox", name: "network" });
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
  h("label", { class: "wide" }, "System prompt ", prompt),
  h("label", { class: "wide" }, "MCP servers ", mcp),
  h("button", { type: "submit", class: "primary" }, "Create session"));
}
