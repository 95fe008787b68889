// Owns: Markdown -> DOM elements for model text. Text only ever becomes Text nodes; raw HTML in
// the input stays visible as text; links keep only http(s)/mailto targets (R-WEB-5).
// Supports what models write: headings, paragraphs, fenced code, lists, quotes, rules, tables
// (GitHub's pipe tables, with alignment), inline code, bold, italics and links.
// streamingMarkdown() renders a segment that is still arriving: an open code span or bold run
// is closed for display, so `**` or a backtick never flashes raw mid-stream.
import { h, safeUrl, visible } from "./dom.js";

/** Markdown of a text still streaming in: the unfinished last line's open `code` span and
 * `**bold**` run are closed (display only; the complete message is rendered from its text). */
export function streamingMarkdown(source) {
  const text = String(source ?? "");
  const fences = (text.match(/^\s*(```|~~~)/gm) || []).length;
  if (fences % 2) return markdown(text);  // inside a code block: nothing inline to close
  const cut = text.lastIndexOf("\n") + 1;
  let last = text.slice(cut);
  // A heading's marks before its text, or a table row still arriving: held back a moment.
  if (/^\s*#{1,6}\s*$/.test(last) || /^\s*\|/.test(last)) last = "";
  const ticks = (last.match(/`/g) || []).length;
  if (ticks % 2) last += "`";
  else if (((last.replace(/`[^`]*`/g, "").match(/\*\*/g)) || []).length % 2) {
    last = last.replace(/\*+\s*$/, "");
    if (((last.replace(/`[^`]*`/g, "").match(/\*\*/g)) || []).length % 2) last += "**";
  }
  return markdown(text.slice(0, cut) + last);
}

const TABLE_SEP = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

/** The cells of one pipe-table row (`\|` is a literal bar). */
function cells(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
  return row.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

function isTableStart(lines, i) {
  return i + 1 < lines.length && lines[i].includes("|") && lines[i + 1].includes("|")
    && lines[i + 1].includes("-") && TABLE_SEP.test(lines[i + 1]);
}

function table(lines, i) {
  const head = cells(lines[i]);
  const align = cells(lines[i + 1]).map((c) => (c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : null));
  const cell = (tag, text, k) => h(tag, align[k] ? { dataset: { align: align[k] } } : null, inline(text));
  const body = h("tbody");
  let j = i + 2;
  while (j < lines.length && lines[j].trim() && lines[j].includes("|")) {
    const row = cells(lines[j]);
    body.append(h("tr", null, head.map((_, k) => cell("td", row[k] ?? "", k))));
    j += 1;
  }
  const el = h("div", { class: "table-wrap" },
    h("table", null, h("thead", null, h("tr", null, head.map((text, k) => cell("th", text, k)))), body));
  return [el, j];
}

export function markdown(source) {
  const frag = document.createDocumentFragment();
  const lines = visible(source).split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)(.*)$/);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i += 1;
      const code = h("code", null, body.join("\n"));
      if (fence[2].trim()) code.dataset.lang = fence[2].trim();
      frag.append(h("pre", { class: "code" }, code));
      continue;
    }
    if (!line.trim()) { i += 1; continue; }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      frag.append(h(`h${Math.min(heading[1].length + 2, 6)}`, null, inline(heading[2])));
      i += 1;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) { frag.append(h("hr")); i += 1; continue; }
    if (isTableStart(lines, i)) {
      const [el, next] = table(lines, i);
      frag.append(el);
      i = next;
      continue;
    }
    if (/^\s*>/.test(line)) {
      const body = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) body.push(lines[i++].replace(/^\s*>\s?/, ""));
      frag.append(h("blockquote", null, markdown(body.join("\n"))));
      continue;
    }
    const item = /^\s*([-*+]|\d{1,9}[.)])\s+/;
    if (item.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = h(ordered ? "ol" : "ul");
      while (i < lines.length && item.test(lines[i])) {
        const parts = [lines[i].replace(item, "")];
        i += 1;
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !item.test(lines[i])) parts.push(lines[i++].trim());
        list.append(h("li", null, inline(parts.join(" "))));
      }
      frag.append(list);
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !/^\s*(```|~~~|#{1,6}\s|>)/.test(lines[i]) && !item.test(lines[i])
      && !(para.length && isTableStart(lines, i))) {
      para.push(lines[i++]);
    }
    const p = h("p");
    para.forEach((text, k) => {
      if (k) p.append(h("br"));
      p.append(...inline(text));
    });
    frag.append(p);
  }
  return frag;
}

// Underscore emphasis only at word boundaries (snake_case and __dunder__ names stay as written).
const INLINE = /(`+)([\s\S]*?)\1|\*\*([^*]+)\*\*|(?<!\w)__([^_]+)__(?!\w)|\*([^*\s][^*]*)\*|(?<!\w)_([^_\s][^_]*)_(?!\w)|\[([^\]]*)\]\(([^)\s]*)\)/g;

export function inline(text) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) out.push(text.slice(last, m.index));
    if (m[1]) out.push(h("code", null, m[2]));
    else if (m[3] || m[4]) out.push(h("strong", null, inline(m[3] || m[4])));
    else if (m[5] || m[6]) out.push(h("em", null, inline(m[5] || m[6])));
    else {
      const href = safeUrl(m[8]);
      if (href === "#" || href.startsWith("/") || href.startsWith("data:") || href.startsWith("blob:")) {
        out.push(m[0]);  // not a link we follow: shown as written
      } else {
        out.push(h("a", { href, rel: "noopener noreferrer nofollow", target: "_blank" }, m[7] || href));
      }
    }
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}
