// Owns: start-up (login from the URL fragment) and the hash router:
//   #/                 sessions list and new-session form (R-WEB-1)
//   #/s/<id>           conversation and controls (R-WEB-2, R-WEB-3)
//   #/s/<id>/trace     trace view (R-WEB-4)
//   #/usage            usage charts (R-WEB-4)
import { loginFromFragment, logout } from "./api.js";
import { clear, h } from "./dom.js";
import { sessionsView } from "./sessions.js";
import { conversationView } from "./conversation.js";
import { traceView } from "./trace.js";
import { usageView } from "./usage.js";

const main = document.getElementById("main");
let current = null;

function route() {
  if (current && current.close) current.close();
  current = null;
  clear(main);
  const hash = location.hash || "#/";
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

async function start() {
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
