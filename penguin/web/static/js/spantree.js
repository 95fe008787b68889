// Owns: the trace view's span tree: GET /api/sessions/{id}/spans (a fold of the trace,
// projections.SpanTree) drawn as an expandable tree with a waterfall bar per span, its latency,
// tokens and estimated cost; subagent runs nested under the run_subagent call that started
// them (concurrent calls each with their own); kept current from the session's stream, where a
// running subagent's text shows live under its call (also when the page opens mid-task).
// Does not: fold records itself.
import { api, enc, openStream } from "./api.js";
import { clear, fmtNum, h, s, setText, visible } from "./dom.js";
import { costNode, shortTokens } from "./cost.js";

const LIVE_CHARS = 4000;  // a subagent's live text keeps its tail

export function spanTree(id, pick) {
  const base = `/api/sessions/${enc(id)}`;
  const body = h("div", { class: "span-body" }, h("p", { class: "muted" }, "Loading spans…"));
  const summary = h("span", { class: "muted small" });
  const el = h("section", { class: "spans-card", "aria-label": "Span tree" },
    h("div", { class: "spans-head" }, h("h3", null, "Spans"), summary,
      h("span", { class: "muted small legend" }, "runs → turns → requests, tool calls, compactions · subagents under their call")),
    body);
  const expanded = new Set();  // "session file:ordinal" of spans the user opened or closed
  const collapsed = new Set();
  const live = new Map();  // child session id -> its streaming text
  let timer = null;
  let seq = 0;
  let closed = false;

  async function load() {
    const mine = ++seq;
    let data;
    try {
      data = await api(`${base}/spans`);
    } catch (err) {
      if (mine === seq) clear(body).append(h("p", { class: "error" }, `${err.code}: ${err.message}`));
      return;
    }
    if (mine !== seq || closed) return;
    draw(data);
  }

  function draw(data) {
    const roots = data.spans;
    clear(body);
    if (!roots.length) {
      body.append(h("p", { class: "muted" }, "No runs yet: start a task in the conversation and its spans appear here."));
      setText(summary, "");
      return;
    }
    const all = [];
    const walk = (sp) => { all.push(sp); sp.children.forEach(walk); };
    roots.forEach(walk);
    const now = Date.now();
    const t0 = Math.min(...all.map((sp) => Date.parse(sp.start)).filter((t) => !Number.isNaN(t)));
    const t1 = Math.max(t0 + 1, ...all.map((sp) => (sp.end ? Date.parse(sp.end) : now)).filter((t) => !Number.isNaN(t)));
    const scale = { t0, t1, now };
    const tokens = roots.reduce((a, r) => a + (r.tokens ? r.tokens.total : 0), 0);
    const costs = roots.map((r) => r.cost).filter((c) => c !== null);
    const runs = roots.filter((r) => r.kind === "run").length;
    clear(summary).append(`${runs} run${runs === 1 ? "" : "s"} · ${fmtNum(tokens)} tokens · `,
      costs.length ? costNode(costs.reduce((a, c) => a + c, 0), 0) : h("span", { class: "muted" }, "no price for this model"),
      data.model ? ` · ${data.model}` : "");
    // The latest runs open; earlier ones closed (a long session has thousands of spans).
    const open = (sp, depth) => {
      const key = `${sp.session} ${sp.at}`;
      if (expanded.has(key)) return true;
      if (collapsed.has(key)) return false;
      if (sp.kind === "run") return depth > 0 || roots.indexOf(sp) >= roots.length - 3;
      return sp.kind !== "request";
    };
    body.append(h("ul", { class: "span-tree", role: "tree" }, numbered(roots).map(([sp, n]) => node(sp, 0, scale, open, n))));
  }

  function node(sp, depth, scale, open, nth) {
    const key = `${sp.session} ${sp.at}`;
    const li = h("li", {
      class: `span kind-${sp.kind} st-${sp.status || "open"}`, role: "treeitem",
      dataset: { kind: sp.kind, at: sp.at, session: sp.session, ...(sp.subagent ? { subagent: sp.subagent } : {}) },
    });
    const kids = sp.children.length ? h("ul", { role: "group" }) : null;
    const isOpen = kids ? open(sp, depth) : false;
    let built = false;
    const build = () => {
      if (built || !kids) return;
      built = true;
      kids.append(...numbered(sp.children).map(([c, n]) => node(c, depth + 1, scale, open, n)));
    };
    const toggle = kids ? h("button", {
      type: "button", class: "toggle", "aria-expanded": String(isOpen),
      "aria-label": `${isOpen ? "Collapse" : "Expand"} ${sp.kind} ${sp.name || ""}`.trim(),
      onclick: () => {
        const now = toggle.getAttribute("aria-expanded") !== "true";
        toggle.setAttribute("aria-expanded", String(now));
        toggle.setAttribute("aria-label", `${now ? "Collapse" : "Expand"} ${sp.kind} ${sp.name || ""}`.trim());
        setText(toggle, now ? "▾" : "▸");
        if (now) { build(); expanded.add(key); collapsed.delete(key); } else { collapsed.add(key); expanded.delete(key); }
        kids.hidden = !now;
      },
    }, isOpen ? "▾" : "▸") : h("span", { class: "toggle-space" });
    const here = sp.session === id;
    const at = here
      ? h("button", { type: "button", class: "link at", title: "Show this record and the exact request there", onclick: () => pick(sp.at) }, sp.at)
      : h("a", { class: "at", href: `#/s/${enc(sp.session)}/trace`, title: `In subagent ${sp.session}` }, sp.at);
    // Runs and turns numbered; a request after the first of its turn is a retry.
    const label = sp.kind === "tool_call" ? sp.name
      : sp.kind === "compaction" ? sp.name || ""
        : sp.kind === "request" ? (nth > 1 ? `attempt ${nth}` : "")
          : `#${nth}`;
    li.append(h("div", { class: "span-row" },
      toggle,
      h("span", { class: `tag kind ${sp.kind}` }, sp.kind === "tool_call" ? "tool" : sp.kind),
      h("span", { class: "name" }, visible(label || "")),
      h("span", { class: "status-cell" },
        sp.status && sp.status !== "completed" ? h("span", { class: `tag status st-${sp.status}` }, sp.status) : null,
        sp.end === null ? h("span", { class: "tag status st-open" }, "open") : null),
      waterfall(sp, scale),
      h("span", { class: "lat" }, fmtMs(sp.latency_ms)),
      h("span", { class: "tok", title: sp.tokens ? `${fmtNum(sp.tokens.total)} tokens: ${fmtNum(sp.tokens.cache_read)} cached input, ${fmtNum(sp.tokens.cache_write)} uncached input, ${fmtNum(sp.tokens.output)} output` : "no tokens recorded" },
        sp.tokens ? `${shortTokens(sp.tokens.total)} tok` : ""),
      h("span", { class: "cost-cell" }, sp.tokens && sp.cost !== null ? costNode(sp.cost, 0) : ""),
      at));
    if (sp.subagent) {
      const box = h("div", { class: "subagent-live", hidden: true, "aria-live": "off" },
        h("a", { href: `#/s/${enc(sp.subagent)}`, class: "small" }, `subagent ${sp.subagent}`), h("pre", { class: "live-text" }));
      li.append(box);
      const text = live.get(sp.subagent);
      if (text !== undefined && sp.end === null) showLive(box, text);
    }
    if (kids) {
      if (isOpen) build();
      kids.hidden = !isOpen;
      li.append(kids);
    }
    return li;
  }

  function showLive(box, text) {
    box.hidden = false;
    setText(box.querySelector(".live-text"), text.length > LIVE_CHARS ? `…${text.slice(-LIVE_CHARS)}` : text);
  }

  function onChildText(child, text, replace) {
    const before = live.get(child) || "";
    live.set(child, replace ? text : before + text);
    const holder = body.querySelector(`li[data-subagent="${CSS.escape(child)}"] > .subagent-live`);
    if (holder) showLive(holder, live.get(child));
  }

  const reload = () => { clearTimeout(timer); timer = setTimeout(load, 300); };
  const onMessage = (msg) => {
    const p = msg.payload || {};
    const origin = msg.origin || [];
    if (!origin.length) {
      if (!(p.type || "").startsWith("partial_")) reload();
      return;
    }
    const child = origin[origin.length - 1];
    if (msg.type === "session_meta") { live.set(child, ""); reload(); return; }
    if (p.role !== "assistant") return;
    if (p.type === "partial_text") onChildText(child, p.text || "", p.event_type === "start");
    else if (p.type === "text") onChildText(child, p.text || "", true);
    else if (p.type === "tool_call") onChildText(child, `\n→ ${p.name}\n`, false);
  };
  // Live: a record of this session (or a subagent starting) redraws the tree; a subagent's
  // streaming text goes under its call at once. Opened in the middle of a task, the page first
  // takes what the running subagents said so far and their open segments (R-SRV-6), then
  // follows the stream from there.
  let stream = null;
  (async () => {
    let last = null;
    try {
      const row = await api(base);
      if (row.state !== "idle") {
        const page = await api(`${base}/messages`);
        if (page.live) {
          for (const msg of [...(page.live.subagent_messages || []), ...page.live.fragments]) onMessage(msg);
          last = page.live.cursor;
        }
      }
    } catch (_) {
      // The tree itself says what failed (load); the stream still follows the session.
    }
    if (closed) return;
    stream = openStream(`${base}/stream${last ? `?last_event_id=${enc(last)}` : ""}`, {
      onOpen: reload,
      onMessage,
      onServer: (ev) => { if (ev.type === "task_state") reload(); },
    });
  })();
  return { el, close() { closed = true; clearTimeout(timer); if (stream) stream.close(); } };
}

/** [span, its 1-based number among its siblings of the same kind]. */
function numbered(spans) {
  const seen = {};
  return spans.map((sp) => { seen[sp.kind] = (seen[sp.kind] || 0) + 1; return [sp, seen[sp.kind]]; });
}

function waterfall(sp, { t0, t1, now }) {
  const start = Date.parse(sp.start);
  const end = sp.end ? Date.parse(sp.end) : now;
  const svg = s("svg", { class: "waterfall", viewBox: "0 0 1000 10", preserveAspectRatio: "none", "aria-hidden": "true" });
  if (Number.isNaN(start)) return svg;
  const x = ((start - t0) / (t1 - t0)) * 1000;
  const w = Math.max(3, ((Math.max(end, start) - start) / (t1 - t0)) * 1000);
  svg.append(s("rect", { x: Math.min(x, 997), y: 1, width: w, height: 8, class: `bar ${sp.kind}${sp.end ? "" : " open"}` }));
  return svg;
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return "…";
  if (ms < 10) return `${ms.toFixed(1)} ms`;
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}
