// Owns: start-up (login from the URL fragment) and the hash router:
//   #/                 sessions list and new-session form (R-WEB-1)
//   #/s/<id>           conversation and controls (R-WEB-2, R-WEB-3)
//   #/s/<id>/trace     trace view (R-WEB-4)
//   #/usage            usage charts (R-WEB-4)
// and the header: the theme toggle (theme.js), the skip link, the current page's nav link.
import { loginFromFragment, logout } from "./api.js";
import { clear, h, setText } from "./dom.js";
import { sessionsView } from "./sessions.js";
import { conversationView } from "./conversation.js";
import { traceView } from "./trace.js";
import { usageView } from "./usage.js";

const main = document.getElementById("main");
let current = null;

function route(ev) {
  if (current && current.close) current.close();
  current = null;
  clear(main);
  const hash = location.hash || "#/";
  for (const a of document.querySelectorAll(".top nav a")) {
    const here = a.getAttribute("href") === (hash.startsWith("#/usage") ? "#/usage" : "#/");
    if (here) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  // A keyboard or screen-reader user lands on the new page, not on the link they left.
  if (ev) main.focus({ preventScroll: true });
  let m;
  if ((m = hash.match(/^#\/s\/([^/]+)\/trace$/))) current = traceView(main, decodeURIComponent(m[1]));
  else if ((m = hash.match(/^#\/s\/([^/]+)$/))) current = conversationView(main, decodeURIComponent(m[1]));
  else if (hash === "#/usage") current = usageView(main);
  else current = sessionsView(main);
}

function unauthorized() {
  if (current && current.close) current.close();
  current = null;
  clear(main).append(h("section", { class: "card login" },
    h("h2", null, "Not logged in"),
    h("p", null, "Open the login URL that ", h("code", null, "penguin serve"),
      " printed when it started (it ends with ", h("code", null, "#token=…"), ")."),
  ));
}

function header() {
  const button = document.getElementById("theme");
  const theme = window.penguinTheme;
  const label = (mode) => `Theme: ${mode}`;
  setText(button, label(theme.get()));
  button.addEventListener("click", () => { setText(button, label(theme.cycle())); });
  // The skip link moves focus without touching the hash (the router owns it).
  document.querySelector(".skip").addEventListener("click", (ev) => {
    ev.preventDefault();
    main.focus();
  });
}

async function start() {
  header();
  try {
    await loginFromFragment();
  } catch (err) {
    unauthorized();
    return;
  }
  window.addEventListener("penguin:unauthorized", unauthorized);
  document.getElementById("logout").addEventListener("click", () => { logout(); });
  window.addEventListener("hashchange", route);
  route();
}

start();
