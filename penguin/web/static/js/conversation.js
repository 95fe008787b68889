// Owns: one session's page: history then the live stream (lossless: the stream resumes after
// the history's last position, R-SRV-6/8), and the controls of R-WEB-3 (composer with pasted
// images, steer, stop, approvals, retry countdown, compact, fork, goal mode, the composer
// locked after an auth failure; Enter sends, Shift+Enter is a new line), and the connection
// state: while the server is unreachable the page says so instead of "running", the controls
// wait, and the stream picks up where it left off by itself. Does not: render records
// (Transcript).
import { api, enc, openStream } from "./api.js";
import { isOnline, onConnection } from "./connection.js";
import { clear, h, visible, setText } from "./dom.js";
import { Transcript } from "./transcript.js";
import { emptyHint, sessionInfo } from "./convinfo.js";

export function conversationView(root, id) {
  const base = `/api/sessions/${enc(id)}`;
  const title = h("h2", { class: "title" }, id);
  const stateTag = h("span", { class: "tag state", dataset: { state: "idle" } }, "idle");
  // The session's approval mode (SPEC §23: recorded, so it survives a restart).
  const approvalTag = h("span", { class: "tag approval", title: "approval mode" }, "");
  const goalTag = h("span", { class: "tag goal", hidden: true });
  const sandboxTag = h("span", { class: "tag sandbox", hidden: true });
  const info = sessionInfo();  // workspace, model, approval, sandbox (convinfo.js)
  const empty = emptyHint();  // what to do while nothing is recorded
  let lastRow = null;
  const errorBox = h("div", { class: "error", hidden: true });
  const retryBox = h("div", { class: "retry-wait", hidden: true });
  const authBox = h("div", { class: "auth-failure", hidden: true });
  let source = null;
  let state = "idle";
  let retryTimer = null;
  let authLocked = false;
  let stateEvents = 0;  // task_state events seen: a later one beats our own guess

  const showError = (err) => {
    errorBox.hidden = false;
    setText(errorBox, err.code ? `${err.code}: ${err.message}` : String(err.message || err));
  };
  const call = async (path, body, method = "POST") => {
    errorBox.hidden = true;
    try { return await api(`${base}${path}`, { method, body }); } catch (err) { showError(err); return undefined; }
  };

  const transcript = new Transcript({
    sessionId: id,
    onFork: async (position) => {
      const row = await call("/fork", { at: { file: position.file, ordinal: position.ordinal } });
      if (row) location.hash = `#/s/${enc(row.id)}`;
    },
    onRewind: async (position) => {
      // R-SNAP-2: show what the rewind will write, then restore and go on in the fork.
      const at = { file: position.file, ordinal: position.ordinal };
      const dry = await call("/rewind", { at, dry_run: true });
      if (!dry) return;
      const p = dry.plan;
      const files = [...p.create.map((n) => `create ${n}`), ...p.change.map((n) => `change ${n}`),
        ...p.delete.map((n) => `delete ${n}`)];
      let question = `Put the workspace back as it was at the end of task ${p.task}?\n\n`
        + (p.snapshot === null ? "No snapshot before this point: no file changes."
          : files.length ? files.join("\n") : "The workspace already matches.");
      if (p.outside.length) {
        question += `\n\nChanged outside the session since its last snapshot (overwritten):\n${p.outside.join("\n")}`;
      }
      if (!window.confirm(visible(question))) return;
      const res = await call("/rewind", { at, force: p.outside.length > 0 });
      if (res) location.hash = `#/s/${enc(res.session.id)}`;
    },
    onDecide: (callId, decision) => call(`/approvals/${enc(callId)}`, { decision }),
    onRetryWait: (p) => startCountdown(p.retry_in_ms),
    onRequestBegin: () => stopCountdown(),
    onAuthFailure: (message) => lockComposer(message),
  });

  // ------------------------------------------------------------ composer
  const text = h("textarea", {
    class: "input", rows: 3, placeholder: "Message", "aria-label": "Message", "aria-describedby": "composer-hint",
  });
  const hint = h("p", { class: "hint", id: "composer-hint" });
  const thumbs = h("div", { class: "thumbs" });
  let images = [];
  text.addEventListener("paste", (ev) => {
    for (const item of ev.clipboardData ? ev.clipboardData.items : []) {
      if (item.kind !== "file" || !item.type.startsWith("image/")) continue;
      ev.preventDefault();
      const reader = new FileReader();
      reader.onload = () => { images.push(String(reader.result)); drawThumbs(); };
      reader.readAsDataURL(item.getAsFile());
    }
  });
  function drawThumbs() {
    clear(thumbs);
    images.forEach((url, i) => thumbs.append(h("span", { class: "thumb" },
      h("img", { src: url, alt: "pasted image" }),
      h("button", { class: "link", title: "Remove", "aria-label": `Remove pasted image ${i + 1}`, onclick: () => { images.splice(i, 1); drawThumbs(); } }, "×"))));
  }
  const goalOn = h("input", { type: "checkbox", class: "goal-on" });
  const budget = h("input", { type: "number", min: 1, class: "budget", placeholder: "token budget", "aria-label": "Goal token budget (optional)" });
  const send = h("button", { class: "primary send", onclick: () => submit() }, "Send");
  const steer = h("button", { class: "steer", onclick: () => submit(true) }, "Steer");
  const stop = h("button", { class: "danger stop", onclick: () => call("/abort") }, "Stop");
  const compact = h("button", { class: "compact", onclick: () => call("/compact") }, "Compact");
  const compactWhy = h("span", { class: "muted small compact-why" });
  // Enter sends (steers while a task runs), Shift+Enter is a new line; not while an input
  // method is composing a character (Enter then confirms the composition), nor on a touch
  // screen, whose keyboard has no Shift+Enter: there Enter is a new line and Send sends.
  const touch = window.matchMedia("(pointer: coarse)");
  text.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter" || ev.shiftKey || ev.isComposing || ev.keyCode === 229 || touch.matches) return;
    ev.preventDefault();
    submit(state !== "idle");
  });

  function parts() {
    const out = [];
    if (text.value.trim()) out.push({ type: "text", text: text.value });
    for (const url of images) out.push({ type: "image", data_url: url });
    return out;
  }
  async function submit(steering = false) {
    const input = parts();
    if (!input.length || authLocked) return;
    let ok;
    if (!isOnline()) return;
    if (steering) {
      ok = await call("/steer", { input });
      if (ok !== undefined) transcript.queueSteer(text.value.trim(), images);
    } else {
      const body = { input };
      if (goalOn.checked) body.goal = budget.value ? { budget: Number(budget.value) } : {};
      const seen = stateEvents;
      ok = await call("/tasks", body);
      // The stream may already have said more (even "idle" for a quick task): it wins.
      if (ok && seen === stateEvents) setState("running");
    }
    if (ok !== undefined) { text.value = ""; images = []; drawThumbs(); }
  }

  function lockComposer(message) {
    authLocked = true;
    clear(authBox).append(
      h("strong", null, "Authentication failed: "), visible(message), " ",
      h("button", { class: "dismiss", onclick: () => { authLocked = false; authBox.hidden = true; setState(state); } }, "Dismiss"));
    authBox.hidden = false;
    setState(state);
  }

  function setState(next) {
    state = next;
    const offline = !isOnline();
    // Offline, the last known state is not claimed: the task may have ended with the server.
    setText(stateTag, offline ? "connection lost" : next);
    stateTag.dataset.state = offline ? "offline" : next;
    const running = next !== "idle";
    send.disabled = running || authLocked || offline;
    text.disabled = authLocked;
    steer.hidden = !running;
    steer.disabled = authLocked || offline;
    stop.hidden = !running;
    stop.disabled = offline;
    compact.disabled = running || offline || compact.dataset.why !== "ok";
    transcript.el.classList.toggle("offline", offline);
    setText(hint, authLocked ? "" : running
      ? "Enter sends a steering message to the running task · Shift+Enter for a new line"
      : "Enter to send · Shift+Enter for a new line · paste images with Ctrl+V");
    transcript.setIdle(!running);
    if (!running) stopCountdown();
  }

  // ------------------------------------------------------------ retry countdown
  function startCountdown(ms) {
    stopCountdown();
    const until = performance.now() + ms;
    const label = h("span", { class: "count" });
    const tick = () => {
      const left = Math.max(0, until - performance.now());
      setText(label, `Retrying in ${(left / 1000).toFixed(1)} s`);
    };
    clear(retryBox).append(label,
      h("button", { class: "retry-now", onclick: () => call("/retry-now") }, "Retry now"),
      h("button", { class: "give-up", onclick: () => call("/abort") }, "Give up"));
    retryBox.hidden = false;
    tick();
    retryTimer = setInterval(tick, 100);
  }
  function stopCountdown() {
    clearInterval(retryTimer);
    retryTimer = null;
    retryBox.hidden = true;
  }

  // ------------------------------------------------------------ session details
  async function details() {
    const row = await call("", undefined, "GET");
    if (!row) return;
    setText(title, row.title || row.first_prompt || row.id);
    lastRow = row;
    info.update(row);
    if (!empty.el.hidden) empty.show(row);
    showSandbox(row.sandbox);
    setText(approvalTag, row.approval ? `approval: ${row.approval}` : "");
    approvalTag.hidden = !row.approval;
    const why = row.compactability || "unsupported";
    compact.dataset.why = why;
    setText(compactWhy, why === "ok" ? "" : `Compact unavailable: ${{
      unsupported: "compaction is off for this session",
      empty: "nothing to compact yet",
      just_compacted: "the context was just compacted",
    }[why] || why}`);
    compact.title = compactWhy.textContent;
    setState(state);
  }

  // SPEC R-BOX-3: the sandbox the tools run under; "off" stands out.
  function showSandbox(box) {
    sandboxTag.hidden = false;
    sandboxTag.classList.toggle("off", !box || box.mode === "off");
    if (!box) setText(sandboxTag, "no sandbox");
    else if (box.mode === "off") setText(sandboxTag, `sandbox OFF${box.network ? "" : " · network off"}`);
    else setText(sandboxTag, `sandbox ${box.mode} · network ${box.network ? "on" : "off"}`);
  }

  root.append(h("section", { class: "conversation" },
    h("div", { class: "conv-head" }, title, stateTag, approvalTag, goalTag, sandboxTag,
      h("a", { href: `#/s/${enc(id)}/trace`, class: "button" }, "Trace view")),
    info.el, empty.el,
    transcript.el,
    errorBox, authBox, retryBox,
    h("div", { class: "composer" }, text, hint, thumbs,
      h("div", { class: "row" },
        h("label", { class: "goal-mode" }, goalOn, " Goal mode"), budget,
        h("span", { class: "spacer" }),
        compactWhy, compact, stop, steer, send))));
  setState("idle");

  // ------------------------------------------------------------ history, then the stream
  function onServer(ev) {
    switch (ev.type) {
      case "task_state":
        stateEvents += 1;
        setState(ev.state);
        if (ev.state === "idle") { transcript.interruptOpen(); transcript.dropSteers(); details(); }
        break;
      case "approval_request": transcript.approval(ev.tool_call, ev.origin || (ev.tool_call || {}).origin); break;
      case "title": setText(title, ev.title); break;
      case "goal_round": goalTag.hidden = false; setText(goalTag, `goal round ${ev.round} · ${ev.tokens_used} tokens`); break;
      case "goal_finished":
        goalTag.hidden = false;
        setText(goalTag, `goal ${ev.outcome} · ${ev.rounds} rounds · ${ev.tokens_used} tokens`);
        break;
      case "resync_required": transcript.staleOpen(); break;
      default: break;
    }
  }

  let closed = false;
  let reconnecting = false;
  (async () => {
    let page;
    try {
      page = await api(`${base}/messages`);
    } catch (err) {
      showError(err);
      return;
    }
    if (closed) return;
    transcript.load(page.messages);
    // Nothing said yet (a new session writes its header records only): say what to do.
    if (!page.live && !page.messages.some((m) => (m.message.payload || {}).type === "text")) empty.show(lastRow);
    let last = null;
    if (transcript.lastAuth) lockComposer(transcript.lastAuth);
    if (page.live) {
      // What the running task's subagents said so far (never in this trace, R-SUB-2), then
      // the open segments: a reload shows their text under their call again.
      for (const msg of page.live.subagent_messages || []) transcript.add(msg, null, true);
      for (const frag of page.live.fragments) transcript.add(frag, null, true);
      last = page.live.cursor;
      setState("running");
      const wait = transcript.lastRetry;  // reloaded during a backoff: the countdown goes on
      if (wait) startCountdown(Math.max(0, wait.ms - (Date.now() - wait.at)));
    } else if (page.messages.length) {
      const p = page.messages[page.messages.length - 1].position;
      last = `${p.file}:${p.ordinal}`;
    } else {
      // Nothing recorded yet: a task may start before the stream opens (Send is live at
      // once), so the stream starts at the session's beginning, not at "now".
      last = "0:0";
    }
    scrollToEnd();
    source = openStream(`${base}/stream${last ? `?last_event_id=${enc(last)}` : ""}`, {
      onMessage: (msg, eventId) => {
        if ((msg.payload || {}).type === "text" || (msg.payload || {}).type === "partial_text") empty.hide();
        const stick = nearEnd();
        transcript.add(msg, position(eventId), true);
        if (stick) scrollToEnd();
      },
      onServer,
      // Back after a drop: the session's details may have changed (a restart ends its task).
      onOpen: () => { if (reconnecting) { reconnecting = false; details(); } },
      onDrop: () => { reconnecting = true; },
    });
    details();
  })();
  const unwatch = onConnection(() => setState(state));

  return {
    close() {
      closed = true;
      unwatch();
      if (source) source.close();
      stopCountdown();
      transcript.close();
    },
  };
}

/** The trace position of a recorded message's event id (`<file>:<ordinal>`), else null. */
function position(eventId) {
  const m = /^(\d+):(\d+)$/.exec(eventId || "");
  return m ? { file: Number(m[1]), ordinal: Number(m[2]) } : null;
}

function nearEnd() {
  const el = document.scrollingElement;
  return el.scrollHeight - el.scrollTop - el.clientHeight < 120;
}

function scrollToEnd() {
  const el = document.scrollingElement;
  el.scrollTop = el.scrollHeight;
}
