// Owns: Markdown -> DOM elements for model text. Text only ever becomes Text nodes; raw HTML in
// the input stays visible as text; links keep only http(s)/mailto targets (R-WEB-5).
// Supports what models write: headings, paragraphs, fenced code, lists, quotes, rules,
// inline code, bold, italics and links.
import { h, safeUrl, visible } from "./dom.js";

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
    while (i < lines.length && lines[i].trim() && !/^\s*(```|~~~|#{1,6}\s|>)/.test(lines[i]) && !item.test(lines[i])) {
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
