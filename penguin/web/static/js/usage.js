// Owns: the usage page (R-WEB-4, R-SRV-10): tokens over time (per hour), per session and per
// model, drawn as hand-made SVG bar charts (no library: a few bar charts are a few lines); the
// estimated cost over time (per day) and per session and model, from the server's price table
// (models without a price show tokens only); and the failed requests.
import { api, enc } from "./api.js";
import { clear, drawWidth, fmtNum, fmtTime, h, s, visible } from "./dom.js";
import { costNode, fmtCost } from "./cost.js";

export function usageView(root) {
  const charts = {
    hour: h("div", { class: "chart", dataset: { chart: "time" } }),
    session: h("div", { class: "chart", dataset: { chart: "session" } }),
    model: h("div", { class: "chart", dataset: { chart: "model" } }),
  };
  const cost = h("div", { class: "chart", dataset: { chart: "cost" } });
  const tables = { session: h("div", { class: "cost-table" }), model: h("div", { class: "cost-table" }) };
  const errors = h("div", { class: "errors" });
  root.append(h("section", { class: "usage" },
    h("h2", null, "Usage"),
    h("div", { class: "card" }, h("h3", null, "Estimated cost over time (per day, US dollars)"), cost,
      h("p", { class: "muted small" }, "From the price table: the built-in list prices under the [prices] tables of config.toml (see the docs' Settings page). Models without a price count as tokens only.")),
    h("div", { class: "card" }, h("h3", null, "Tokens over time (per hour)"), charts.hour),
    h("div", { class: "card" }, h("h3", null, "Tokens and cost per session"), charts.session, tables.session),
    h("div", { class: "card" }, h("h3", null, "Tokens and cost per model"), charts.model, tables.model),
    h("div", { class: "card" }, h("h3", null, "Failed requests"), errors)));
  for (const group of Object.keys(charts)) {
    api(`/api/usage?group_by=${group}`).then((data) => {
      clear(charts[group]).append(barChart(data.rows, group, drawWidth(charts[group])));
      if (tables[group]) clear(tables[group]).append(costTable(data.rows, group));
    }).catch((err) => clear(charts[group]).append(h("p", { class: "error" }, err.message)));
  }
  api("/api/usage?group_by=day").then((data) => {
    clear(cost).append(costChart(data.rows, drawWidth(cost)));
  }).catch((err) => clear(cost).append(h("p", { class: "error" }, err.message)));
  api("/api/usage/errors").then((data) => {
    if (!data.errors.length) { errors.append(h("p", { class: "muted" }, "None.")); return; }
    errors.append(h("table", null, h("tr", null, ["Time", "Session", "Status", "Message"].map((x) => h("th", null, x))),
      data.errors.slice(-200).map((e) => h("tr", null, h("td", null, fmtTime(e.time)),
        h("td", null, h("a", { href: `#/s/${encodeURIComponent(e.session)}` }, e.session)),
        h("td", null, e.status), h("td", null, visible(e.message || ""))))));
  }).catch((err) => errors.append(h("p", { class: "error" }, err.message)));
  return { close() {} };
}

const SERIES = [["cache_read", "cached input"], ["cache_write", "uncached input"], ["output", "output"]];

function costTable(rows, group) {
  if (!rows.length) return h("span");
  const sorted = [...rows].sort((a, b) => (b.cost ?? -1) - (a.cost ?? -1) || b.total - a.total);
  return h("table", { class: "costs" },
    h("thead", null, h("tr", null, [group === "session" ? "Session" : "Model", "Requests", "Tokens", "Estimated cost"].map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", null, sorted.map((r) => h("tr", { dataset: { key: String(r.key ?? "") } },
      h("td", null, group === "session" ? h("a", { href: `#/s/${enc(r.key)}` }, r.key) : String(r.key ?? "(unknown)")),
      h("td", { class: "num" }, fmtNum(r.requests)),
      h("td", { class: "num" }, fmtNum(r.total)),
      h("td", { class: "num" }, costNode(r.cost, r.unpriced_tokens))))));
}

function costChart(rows, width) {
  if (!rows.length) return h("p", { class: "muted" }, "No usage recorded yet.");
  if (!rows.some((r) => r.cost !== null)) {
    return h("p", { class: "muted" }, `No model used so far has a price: ${fmtNum(rows.reduce((a, r) => a + r.total, 0))} tokens, cost unknown. Add the model to the [prices] tables of config.toml.`);
  }
  const left = 70, bottom = 60, top = 10, height = 220;
  const max = Math.max(1e-9, ...rows.map((r) => r.cost || 0));
  const bw = Math.min(90, (width - left - 10) / rows.length);
  const y = (v) => top + (height - top - bottom) * (1 - v / max);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, class: "bars cost-bars", role: "img", "aria-label": "estimated cost per day" });
  for (let k = 0; k <= 4; k += 1) {
    const v = (max * k) / 4;
    svg.append(s("line", { x1: left, x2: width - 10, y1: y(v), y2: y(v), class: "grid" }),
      s("text", { x: left - 6, y: y(v) + 4, class: "tick", "text-anchor": "end" }, fmtCost(v) || "$0"));
  }
  rows.forEach((r, i) => {
    const x = left + i * bw + bw * 0.1;
    const v = r.cost || 0;
    const note = r.unpriced_tokens ? ` (+ ${fmtNum(r.unpriced_tokens)} unpriced tokens)` : "";
    svg.append(s("g", { class: "bar" },
      s("title", null, `${r.key}: ${fmtCost(r.cost) ?? "no price"}${note}, ${fmtNum(r.total)} tokens`),
      s("rect", { x, width: Math.max(1, bw * 0.8), y: y(v), height: Math.max(0, y(0) - y(v)), class: "series-cost" })));
    svg.append(s("text", { x: x + bw * 0.4, y: height - bottom + 14, class: "tick", "text-anchor": "end", transform: `rotate(-30 ${x + bw * 0.4} ${height - bottom + 14})` }, visible(String(r.key ?? ""))));
  });
  const total = rows.reduce((a, r) => a + (r.cost || 0), 0);
  const unpriced = rows.reduce((a, r) => a + (r.unpriced_tokens || 0), 0);
  return h("div", null, svg, h("p", { class: "total small" }, "Total: ", costNode(total, unpriced)));
}

function barChart(rows, group, width) {
  if (!rows.length) return h("p", { class: "muted" }, "No usage recorded yet.");
  const left = 70, bottom = 60, top = 10, height = 260;
  const max = Math.max(1, ...rows.map((r) => r.cache_read + r.cache_write + r.output));
  const bw = Math.min(90, (width - left - 10) / rows.length);
  const y = (v) => top + (height - top - bottom) * (1 - v / max);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, class: "bars", role: "img", "aria-label": `tokens per ${group}` });
  for (let k = 0; k <= 4; k += 1) {
    const v = (max * k) / 4;
    svg.append(s("line", { x1: left, x2: width - 10, y1: y(v), y2: y(v), class: "grid" }),
      s("text", { x: left - 6, y: y(v) + 4, class: "tick", "text-anchor": "end" }, fmtNum(max >= 40 ? Math.round(v) : Math.round(v * 10) / 10)));
  }
  rows.forEach((r, i) => {
    let acc = 0;
    const x = left + i * bw + bw * 0.1;
    const price = fmtCost(r.cost);
    const g = s("g", { class: "bar" }, s("title", null, `${r.key}: ${fmtNum(r.total)} tokens in ${r.requests} requests${price ? `, ${price}` : ""}`));
    SERIES.forEach(([key], k) => {
      const v = r[key] || 0;
      if (!v) return;
      g.append(s("rect", { x, width: Math.max(1, bw * 0.8), y: y(acc + v), height: y(acc) - y(acc + v), class: `series-${k}` }));
      acc += v;
    });
    svg.append(g);
    const label = shortLabel(String(r.key ?? ""), group);
    svg.append(s("text", { x: x + bw * 0.4, y: height - bottom + 14, class: "tick", "text-anchor": "end", transform: `rotate(-30 ${x + bw * 0.4} ${height - bottom + 14})` }, visible(label)));
  });
  const legend = h("div", { class: "legend" }, SERIES.map(([, name], k) => h("span", null, h("i", { class: `swatch series-${k}` }), name)));
  return h("div", null, svg, legend);
}

function shortLabel(key, group) {
  if (group === "session") return key.replace(/^session-/, "").slice(-14);
  if (group === "hour") return key.replace("T", " ") + "h";
  return key.length > 24 ? key.slice(0, 23) + "…" : key;
}
