// Owns: building DOM nodes. Every string becomes a Text node, never markup (R-WEB-5):
// the Web App never assigns HTML strings (tests/penguin/web/test_web_static.py checks).

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
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
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

/** Visible text for untrusted strings: control characters (terminal escapes) shown as \x1b. */
export function visible(text) {
  return String(text ?? "").replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/g,
    (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}
