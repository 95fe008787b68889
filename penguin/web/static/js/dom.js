// Owns: building DOM nodes. Every string becomes a Text node, never markup (R-WEB-5):
// the Web App never assigns HTML strings (tests/penguin/web/test_web_static.py checks). Every
// string shown goes through visible(): control and bidi characters are shown as escapes, so
// `invoice\u202etxt.sh` cannot display as `invoice…hs.txt` (issue 29).

/** h("div", {class: "x", onclick: fn}, "text", childNode, [more]) */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";

export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  if (attrs) setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "dataset") {
      Object.assign(el.dataset, value);
    } else if (key === "href" || key === "src") {
      el.setAttribute(key, safeUrl(value));
    } else {
      el.setAttribute(key, value === true ? "" : visible(value));
    }
  }
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(visible(child)));
  }
  return el;
}

/** Only same-origin paths, fragments, http(s) and mailto links; anything else becomes "#". */
export function safeUrl(url) {
  const text = String(url).trim();
  if (text.startsWith("#") || (text.startsWith("/") && !text.startsWith("//"))) return text;
  if (/^data:image\/(png|jpe?g|gif|webp);base64,/i.test(text)) return text;
  if (/^blob:/i.test(text)) return text;
  try {
    const parsed = new URL(text);
    if (["http:", "https:", "mailto:"].includes(parsed.protocol)) return parsed.href;
  } catch (_) { /* not a URL */ }
  return "#";
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function fmtTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString();
}

export function fmtNum(n) {
  return Number(n || 0).toLocaleString();
}

// The CLI's table (penguin/cli/terminal/safe.py), mirrored: C0 controls but tab and newline, DEL, C1
// controls, the Unicode bidi controls and lone surrogates; each is shown as \xNN below U+0100,
// else \uNNNN. tests/penguin/web/test_web_safety.py checks that both agree on every code point.
const BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069";
const UNSAFE = new RegExp(`[\\u{0}-\\u{8}\\u{b}-\\u{1f}\\u{7f}-\\u{9f}${BIDI}\\u{d800}-\\u{dfff}]`, "gu");

/** Visible text for untrusted strings: control and bidi characters shown as escapes. */
export function visible(text) {
  return String(text ?? "").replace(UNSAFE, (c) => {
    const code = c.codePointAt(0);
    return code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
  });
}

/** Set an element's text to an untrusted string (see visible()). */
/** The width a chart is drawn at: its box's, so one SVG unit is one CSS pixel and its text
 * keeps its size on a phone (a 900-unit drawing shrunk to 350 px had 4 px text). */
export function drawWidth(el, fallback = 900) {
  const width = el ? el.clientWidth : 0;
  return width ? Math.max(300, Math.round(width)) : fallback;
}

/** Makes an SVG shape a button for the keyboard and assistive technology: focusable, named,
 * and activated by Enter or Space as by a click. */
export function svgButton(el, name, action) {
  el.setAttribute("tabindex", "0");
  el.setAttribute("role", "button");
  el.setAttribute("aria-label", name);
  el.addEventListener("click", action);
  el.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter" && ev.key !== " ") return;
    ev.preventDefault();
    action();
  });
  return el;
}

export function setText(el, text) {
  el.textContent = visible(text);
  return el;
}
