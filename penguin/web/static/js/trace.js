// Owns: the trace view (R-WEB-4): the span tree (runs → turns → requests, tool calls and
// compactions with latency, tokens and cost; subagents nested under the call that started them,
// their text streaming live; spanTree.js), files, records with file:ordinal, validator findings
// (reader diagnostics), a timeline of request spans and tool calls on a time axis (SVG), and
// the exact request at a picked record (GET .../context?at=, R-TOOL-1).
import { api, enc } from "./api.js";
import { clear, drawWidth, h, s, svgButton, visible, setText } from "./dom.js";
import { spanTree } from "./spantree.js";

const LIMIT = 2000;

export function traceView(root, id) {
  const base = `/api/sessions/${enc(id)}`;
  const files = h("div", { class: "files" });
  const findings = h("div", { class: "findings" });
  const timeline = h("div", { class: "timeline" });
  const records = h("ol", { class: "records" });
  const detail = h("div", { class: "detail" }, h("p", { class: "muted" }, "Pick a record to see the exact request the model received at that point."));
  const error = h("p", { class: "error", hidden: true });
  const spans = spanTree(id, (at) => pick(at));
  root.append(h("section", { class: "trace" },
    h("div", { class: "conv-head" }, h("h2", null, "Trace ", h("span", { class: "muted" }, id)),
      h("a", { href: `#/s/${enc(id)}`, class: "button" }, "Conversation")),
    error, spans.el, files, findings, timeline,
    h("div", { class: "split" }, h("div", { class: "pane" }, records), h("div", { class: "pane" }, detail))));

  let current = null;
  async function openFile(n) {
    current = n;
    for (const b of files.querySelectorAll("button")) b.classList.toggle("active", b.dataset.n === String(n));
    let page;
    try {
      page = await api(`${base}/traces/${n}?offset=0&limit=${LIMIT}`);
    } catch (err) { error.hidden = false; setText(error, err.message); return; }
    clear(findings);
    const found = [
      ...page.diagnostics.map((d) => ({ line: d.line, severity: "error", rule: "read", message: d.kind })),
      ...(page.findings || []),
    ];
    if (found.length) {
      findings.append(h("h3", null, `Validator findings (${found.length})`),
        h("ul", null, found.map((f) => h("li", { class: `finding ${f.severity}` },
          `line ${f.line}: ${f.rule} ${f.severity}: ${visible(f.message)}`))));
    } else findings.append(h("p", { class: "ok small" }, "Validator: no findings in this file."));
    clear(records);
    let loaded = [];
    const more = h("li", { class: "more" });
    const showPage = (got) => {
      more.remove();
      for (const r of got.records) {
        const pos = `${n}:${r.ordinal}`;
        records.append(h("li", { class: "record", dataset: { at: pos } },
          h("button", { class: "link at", onclick: () => pick(pos) }, pos),
          " ", h("span", { class: "rtype" }, describe(r.record))));
      }
      loaded = loaded.concat(got.records);
      const left = got.total - loaded.length;
      if (left > 0) {
        // Paged (issue 29): the next records on demand, however long the file is.
        clear(more).append(h("span", { class: "muted" }, `… ${left} more records `),
          h("button", { class: "load-more", onclick: () => loadMore(more) }, `Load ${Math.min(left, LIMIT)} more`));
        records.append(more);
      }
      clear(timeline).append(h("h3", null, "Timeline"));
      timeline.append(drawTimeline(loaded, pick, n, drawWidth(timeline)));
    };
    const loadMore = async (button) => {
      for (const b of button.querySelectorAll("button")) b.disabled = true;
      try {
        const next = await api(`${base}/traces/${n}?offset=${loaded.length}&limit=${LIMIT}`);
        if (current === n) showPage(next);
      } catch (err) { error.hidden = false; setText(error, err.message); }
    };
    showPage(page);
  }

  async function pick(at) {
    const [file] = at.split(":");
    if (current !== Number(file) && files.querySelector(`button[data-n="${CSS.escape(file)}"]`)) await openFile(Number(file));
    for (const li of records.querySelectorAll("li.record")) {
      li.classList.toggle("active", li.dataset.at === at);
      if (li.dataset.at === at) li.scrollIntoView({ block: "nearest" });
    }
    clear(detail).append(h("p", { class: "muted" }, `Loading ${at}…`));
    try {
      const data = await api(`${base}/context?at=${enc(at)}`);
      clear(detail).append(contextView(data));
    } catch (err) {
      clear(detail).append(h("p", { class: "error" }, `${err.code}: ${err.message}`));
    }
  }

  (async () => {
    try {
      const list = await api(`${base}/traces`);
      const rows = list.files || list.traces || list;
      for (const f of rows) {
        files.append(h("button", { class: "file", dataset: { n: String(f.index) }, onclick: () => openFile(f.index) },
          `file ${f.index}`, h("span", { class: "muted small" }, ` ${f.records} records · ${f.size} bytes${f.closed ? " · closed" : ""}`)));
      }
      if (rows.length) openFile(rows[rows.length - 1].index);
    } catch (err) { error.hidden = false; setText(error, err.message); }
  })();
  return { close() { current = null; spans.close(); } };
}

function describe(rec) {
  const p = rec.payload || {};
  const kind = rec.type === "session_meta" ? "session_meta" : `${p.type}`;
  let extra = "";
  if (p.type === "text") extra = `${p.role}: ${p.text}`;
  else if (p.type === "thinking") extra = p.thinking;
  else if (p.type === "tool_call") extra = `${p.name}(${p.arguments})`;
  else if (p.type === "tool_call_output") extra = `${p.tool_call_id} → ${p.output}`;
  else if (p.type === "request_end") extra = `${p.status}${p.error_message ? `: ${p.error_message}` : ""}`;
  else if (p.type === "token_usage") extra = `total ${p.request?.total}`;
  else if (p.type === "approval_decision") extra = `${p.decision} ${p.tool_call_id}`;
  extra = visible(extra).replace(/\s+/g, " ");
  return `${kind}${extra ? " — " + (extra.length > 140 ? extra.slice(0, 139) + "…" : extra) : ""}`;
}

function contextView(data) {
  const out = h("div", { class: "context" },
    h("h3", null, `At ${data.at}`, h("span", { class: "muted small" }, ` line ${data.line}`)),
    h("pre", { class: "record-json" }, visible(JSON.stringify(data.record, null, 2))));
  const req = data.request;
  if (!req) {
    out.append(h("p", { class: "muted" }, "Not a request_begin: the context at this record."));
    if (data.context) out.append(h("pre", { class: "record-json" }, visible(JSON.stringify(data.context, null, 2))));
    return out;
  }
  out.append(h("h3", { class: "request-title" }, "Exact request"),
    h("h4", null, "System prompt"), h("pre", { class: "system" }, visible(req.system_prompt || "(empty)")),
    h("h4", null, `Tools (${(req.tools || []).length})`),
    h("ul", { class: "tools" }, (req.tools || []).map((t) => h("li", null, h("code", null, t.name), " ", visible(t.description || "")))),
    h("h4", null, `Messages (${req.messages.length})`),
    h("ol", { class: "req-messages" }, req.messages.map((row) => {
      const m = row.message || {};
      const p = m.payload || {};
      return h("li", { class: `req-msg ${p.role || ""}${row.synthesized ? " synthesized" : ""}${row.new ? " new" : ""}` },
        h("span", { class: "tag" }, `${p.role || "?"} ${p.type || m.type}`),
        row.synthesized ? h("span", { class: "tag warn" }, "synthesized") : null,
        row.new ? h("span", { class: "tag" }, "new") : null,
        h("pre", null, visible(p.text ?? p.thinking ?? (p.type === "tool_call" ? `${p.name}(${p.arguments})` : p.output ?? JSON.stringify(p)))));
    })));
  return out;
}

// ------------------------------------------------------------------ timeline (SVG)

function drawTimeline(recs, pick, file, width) {
  const t = (r) => Date.parse(r.record.timestamp);
  const spans = [];
  const calls = new Map();
  let open = null;
  for (const r of recs) {
    const p = r.record.payload || {};
    if (p.type === "request_begin" || p.type === "compaction_begin") open = { start: t(r), ordinal: r.ordinal, kind: p.type === "compaction_begin" ? "compaction" : "request" };
    else if ((p.type === "request_end" || p.type === "compaction_end") && open) {
      spans.push({ ...open, end: t(r), status: p.status });
      open = null;
    } else if (p.type === "tool_call") calls.set(p.tool_call_id, { start: t(r), name: p.name, ordinal: r.ordinal });
    else if (p.type === "tool_call_output" && calls.has(p.tool_call_id)) {
      const c = calls.get(p.tool_call_id);
      c.end = t(r);
      c.status = p.stop_reason;
    }
  }
  const tools = [...calls.values()].map((c) => ({ ...c, end: c.end ?? c.start }));
  const all = [...spans, ...tools];
  if (!all.length) return h("p", { class: "muted" }, "No request spans in this file.");
  const t0 = Math.min(...all.map((x) => x.start));
  const t1 = Math.max(...all.map((x) => x.end), t0 + 1);
  const left = width < 600 ? 80 : 110, row = 18, lanes = assignLanes(tools);
  const laneCount = Math.max(0, ...lanes) + 1;
  const height = 40 + row * (1 + laneCount);
  const x = (ms) => left + ((ms - t0) / (t1 - t0)) * (width - left - 10);
  // A group, not an image: each bar is a button (Enter shows the exact request at its record).
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, class: "timeline-svg", role: "group", "aria-label": "Request spans and tool calls on a time axis" });
  svg.append(s("text", { x: 4, y: 22, class: "lane-label" }, "requests"));
  if (tools.length) svg.append(s("text", { x: 4, y: 22 + row, class: "lane-label" }, "tool calls"));
  for (const sp of spans) {
    const rect = s("rect", { x: x(sp.start), y: 10, width: Math.max(2, x(sp.end) - x(sp.start)), height: row - 4, class: `span ${sp.kind} st-${sp.status}` },
      s("title", null, `${sp.kind} ${file}:${sp.ordinal} ${sp.status} ${sp.end - sp.start} ms`));
    svg.append(svgButton(rect, `${sp.kind} at ${file}:${sp.ordinal}, ${sp.status}, ${fmtMs(sp.end - sp.start)}: show the exact request`,
      () => pick(`${file}:${sp.ordinal}`)));
  }
  tools.forEach((c, i) => {
    const y = 10 + row * (1 + lanes[i]);
    const rect = s("rect", { x: x(c.start), y, width: Math.max(2, x(c.end) - x(c.start)), height: row - 4, class: `call st-${c.status || "open"}` },
      s("title", null, `${c.name} ${file}:${c.ordinal} ${c.end - c.start} ms`));
    svg.append(svgButton(rect, `tool call ${visible(c.name)} at ${file}:${c.ordinal}, ${c.status || "running"}, ${fmtMs(c.end - c.start)}: show the request at its call`,
      () => pick(`${file}:${c.ordinal}`)));
    svg.append(s("text", { x: x(c.start) + 3, y: y + row - 7, class: "call-label" }, visible(c.name)));
  });
  const axisY = height - 16;
  svg.append(s("line", { x1: left, x2: width - 10, y1: axisY, y2: axisY, class: "axis" }));
  for (let k = 0; k <= 4; k += 1) {
    const ms = ((t1 - t0) * k) / 4;
    const xx = left + ((width - left - 10) * k) / 4;
    svg.append(s("line", { x1: xx, x2: xx, y1: axisY, y2: axisY + 4, class: "axis" }),
      s("text", { x: xx, y: axisY + 14, class: "tick", "text-anchor": k === 0 ? "start" : k === 4 ? "end" : "middle" }, fmtMs(ms)));
  }
  return svg;
}

function assignLanes(tools) {
  const ends = [];
  return tools.map((c) => {
    let lane = ends.findIndex((e) => e <= c.start);
    if (lane < 0) { lane = ends.length; ends.push(0); }
    ends[lane] = Math.max(c.end, c.start + 1);
    return lane;
  });
}

function fmtMs(ms) {
  if (ms < 10) return `${ms.toFixed(1)} ms`;
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}
