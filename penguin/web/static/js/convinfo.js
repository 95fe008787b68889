// Owns: what the conversation page says about its session besides the transcript: the header's
// details line (archived, workspace, model, approval mode, sandbox, subagents when offered)
// and, while nothing is recorded yet, what to do next. Built from the session's row (GET /api/sessions/{id}).
import { clear, h, setText } from "./dom.js";
import { costNode } from "./cost.js";

export function sessionInfo() {
  const el = h("div", { class: "conv-info", "aria-label": "Session details" });
  return {
    el,
    update(row) {
      clear(el);
      const item = (name, value) => (value ? h("span", { class: `info-${name.toLowerCase()}` }, `${name} `, h("b", null, value)) : null);
      const box = row.sandbox;
      const sandbox = !box ? "none" : box.mode === "off" ? "off" : `${box.mode}, network ${box.network ? "on" : "off"}`;
      // Element.append writes a null as the text "null": only what applies is appended.
      el.append(...[
        // Archived (a session_archived record): off the sessions list, still readable and usable.
        row.archived ? h("span", { class: "tag info-archived", title: "Archived: listed under Archived on the sessions page" }, "archived") : null,
        item("Workspace", row.workspace),
        item("Model", row.model),
        item("Approval", row.approval),
        item("Sandbox", sandbox),
        item("Subagents", row.subagents ? "on" : null),
        row.tokens ? h("span", { class: "info-usage" }, `${Number(row.tokens).toLocaleString()} tokens `, costNode(row.cost, row.unpriced_tokens)) : null,
      ].filter(Boolean));
    },
  };
}

export function emptyHint() {
  const where = h("span");
  const el = h("div", { class: "empty-hint", hidden: true },
    h("h3", null, "Nothing here yet"),
    h("p", null, "Write what you want done in the box below and press Enter to send (Shift+Enter for a new line). ",
      "The agent works in ", where, "; tool calls that change things wait for your approval unless the session allows them all."),
    h("p", null, "Tick Goal mode to let it keep going until the goal is met; the Trace view shows every request it makes."));
  return {
    el,
    show(row) { setText(where, (row && row.workspace) || "the session's workspace"); el.hidden = false; },
    hide() { el.hidden = true; },
  };
}
