// Owns: turning records (history and live stream) into transcript blocks, and rendering them
// incrementally: only the newest blocks are built at first, older ones when scrolled to (a
// 5,000-message session opens without building 5,000 nodes). Partial messages stream into
// their block (Markdown rendered as it arrives, at most once a frame); the complete message
// replaces them. A half-streamed answer the trace did not keep (the server restarted) stays,
// marked interrupted; a steering message shows as queued until delivered, dropped if the task
// ended first. A subagent's messages nest under the run_subagent call that started it (the
// earliest such call still running without a child, as the span tree links them), its text
// streaming there as it arrives. Does not: send requests (callbacks do).
import { authImage } from "./api.js";
import { h, visible, setText } from "./dom.js";
import { markdown, streamingMarkdown } from "./markdown.js";

const PAGE = 150;
const NESTED = 200;  // a subagent's latest lines kept under its call (its own page has them all)
const ATTACHED = /^\[attached image: (.+)\]$/;
const STEERING = /^\[user_steering\]\n([\s\S]*?)\n\[\/user_steering\]$/;

export class Transcript {
  constructor({ sessionId, onFork, onRewind, onDecide, onRetryWait, onAuthFailure, onRequestBegin }) {
    this.sessionId = sessionId;
    this.cb = { onFork, onRewind, onDecide, onRetryWait, onAuthFailure, onRequestBegin };
    this.blocks = [];
    this.first = 0;  // index of the first block built into the DOM
    this.tools = new Map();  // tool_call_id -> tool block
    this.open = new Map();  // streaming segment key -> block
    this.span = [];  // tool blocks of the current request span
    this.subHosts = new Map();  // child session id -> tool block it nests under
    this.steers = [];  // steering messages sent and not yet delivered (FIFO, R-STEER-3)
    this.dirty = new Set();  // streaming blocks to re-render at the next frame
    this.idle = true;
    this.more = h("button", { class: "more", onclick: () => this.showEarlier() }, "");
    this.list = h("div", { class: "blocks" });
    this.el = h("div", { class: "transcript" }, this.more, this.list);
    this.observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting) && this.first > 0) this.showEarlier();
    });
    this.observer.observe(this.more);
    this.updateMore();
  }

  close() { this.observer.disconnect(); }

  // ------------------------------------------------------------------ feeding records

  /** A whole history page: blocks are made, only the last PAGE are built. */
  load(items) {
    this.loaded = false;
    for (const { message, position } of items) this.add(message, position, false);
    this.loaded = true;
    this.first = Math.max(0, this.blocks.length - PAGE);
    for (let i = this.first; i < this.blocks.length; i += 1) this.list.append(this.node(this.blocks[i]));
    this.updateMore();
  }

  /** One record or live event; `live` is true for what arrives on the stream. */
  add(rec, position, live = true) {
    const p = rec.payload || {};
    if (rec.origin && rec.origin.length) return this.addNested(rec);
    if (rec.type === "event_msg") return this.addEvent(p, rec, position, live);
    if (rec.type !== "model_msg") return null;
    switch (p.type) {
      case "partial_text": return this.partial("text", p, position);
      case "partial_thinking": return this.partial("thinking", p, position);
      case "partial_tool_call": return this.partialCall(p);
      case "partial_tool_call_output": return this.partialOutput(p);
      case "text": return this.text(p, position);
      case "thinking": return this.complete("thinking", "thinking", p.thinking, p, position);
      case "tool_call": return this.toolCall(p, position);
      case "tool_call_output": return this.toolOutput(p);
      case "image_url": return this.push({ kind: "image", role: p.role, src: p.image_url });
      default: return null;
    }
  }

  text(p, position) {
    if (this.inCompaction && p.role === "user") {
      return this.push({ kind: "folded", label: "Compaction prompt", text: p.text, position });
    }
    if (p.role === "user") {
      const lines = (p.text || "").split("\n");
      const images = lines.map((l) => l.match(ATTACHED)).filter(Boolean).map((m) => m[1]);
      let text = lines.filter((l) => !ATTACHED.test(l)).join("\n").trim();
      const steer = STEERING.exec(text);
      if (steer) text = steer[1];
      let goal = null;
      const end = text.startsWith("[goal]\n") ? text.indexOf("\n[/goal]") : -1;
      if (end >= 0) {  // a goal round's input: the protocol block folded away, the body shown
        const block = text.slice(0, end + 8);
        const round = /\nround: (\d+)/.exec(block);
        goal = { round: round ? round[1] : "?", block };
        text = text.slice(end + 8).trim();
      }
      if (steer && this.steers.length) {  // delivered: the queued copy gives way to the record
        this.remove(this.steers.shift());
      }
      return this.push({ kind: "user", text, images, position, steer: Boolean(steer), goal });
    }
    return this.complete("text", "assistant", p.text, p, position);
  }

  complete(key, kind, text, p, position) {
    const block = this.open.get(key);
    this.open.delete(key);
    if (this.inCompaction && kind === "assistant") {  // the summary: folded, not a reply
      if (block) Object.assign(block, { kind: "folded", label: "Compaction summary", text, streaming: false, position });
      if (block) { this.refresh(block); return block; }
      return this.push({ kind: "folded", label: "Compaction summary", text, position });
    }
    if (block) {
      Object.assign(block, { text, stop: p.stop_reason, streaming: false, position });
      this.refresh(block);
      return block;
    }
    return this.push({ kind, text, stop: p.stop_reason, position });
  }

  partial(key, p) {
    const content = key === "text" ? p.text : p.thinking;
    let block = this.open.get(key);
    // After a resync some deltas are gone: the block waits for its complete message as is.
    if (block && block.stale && p.event_type !== "start") return block;
    if (block && block.stale) this.interrupt(block);
    if (p.event_type === "start" || !block) {
      block = this.push({ kind: key === "text" ? "assistant" : "thinking", text: content || "", streaming: true });
      this.open.set(key, block);
      return block;
    }
    if (p.event_type === "delta" && content) {
      block.text += content;
      if (block.kind === "thinking") { if (block.live) block.live.appendData(visible(content)); } else this.redraw(block);
    }
    return block;
  }

  partialCall(p) {
    let block = this.tools.get(p.tool_call_id);
    if (!block) block = this.newTool(p.tool_call_id, p.name, "");
    if (p.name) block.name = p.name;
    if (p.arguments) block.args += p.arguments;
    block.streaming = p.event_type !== "stop";
    this.refresh(block);
    return block;
  }

  partialOutput(p) {
    const block = this.tools.get(p.tool_call_id) || this.newTool(p.tool_call_id, "?", "");
    if (p.event_type === "start") block.output = p.output || "";
    else if (p.output) block.output = (block.output || "") + p.output;
    block.running = true;
    this.refresh(block);
    return block;
  }

  toolCall(p, position) {
    let block = this.tools.get(p.tool_call_id);
    if (!block) block = this.newTool(p.tool_call_id, p.name, p.arguments);
    Object.assign(block, { name: p.name, args: p.arguments, streaming: false, stop: p.stop_reason, position });
    this.refresh(block);
    return block;
  }

  newTool(id, name, args) {
    const block = this.push({ kind: "tool", id, name, args, output: null, decision: null, pending: false, children: [] });
    this.tools.set(id, block);
    this.span.push(block);
    if (this.span.length > 1) {
      this.span.forEach((b, i) => { b.parallel = `parallel ${i + 1}/${this.span.length}`; this.refresh(b); });
    }
    return block;
  }

  toolOutput(p) {
    const block = this.tools.get(p.tool_call_id) || this.newTool(p.tool_call_id, "?", "");
    Object.assign(block, { output: p.output, images: p.images || [], running: false, outStop: p.stop_reason, done: true });
    this.refresh(block);
    return block;
  }

  /** A pending approval (from the stream's approval_request); a subagent's (its `origin`)
   * is asked under the call that started the subagent (R-SUB-5). */
  approval(message, origin) {
    const call = message.payload || message;
    if (origin && origin.length) return this.nestedApproval(call, origin);
    const block = this.tools.get(call.tool_call_id) || this.newTool(call.tool_call_id, call.name, call.arguments);
    block.pending = true;
    this.refresh(block);
  }

  addEvent(p, rec, position, live) {
    switch (p.type) {
      case "request_begin":
        this.span = [];
        this.lastRetry = null;
        if (live && this.cb.onRequestBegin) this.cb.onRequestBegin();
        return null;
      case "request_end": return this.requestEnd(p, rec, live);
      case "approval_decision": {
        const block = this.tools.get(p.tool_call_id);
        if (block) { block.decision = p.decision; block.pending = false; this.refresh(block); }
        return block;
      }
      case "abort":
        this.dropOpen();
        return this.push({ kind: "notice", cls: "abort", text: `Aborted${p.reason ? `: ${p.reason}` : ""}` });
      case "compaction_begin":
        this.inCompaction = true;
        return this.push({ kind: "notice", cls: "compaction", text: `Compaction started (${p.reason}, ${p.mode}; ${p.turns} turns, ${p.context} tokens)` });
      case "compaction_end":
        this.inCompaction = false;
        return this.push({ kind: "notice", cls: "compaction", text: `Compaction ${p.status} (${p.reason}, ${p.mode})${p.error_message ? `: ${p.error_message}` : ""}` });
      case "subagent": {
        const host = this.subagentHost(p.session_id);
        if (host) { this.refresh(host); return host; }
        return this.push({ kind: "notice", cls: "subagent", text: `Subagent ${p.session_id}`, link: p.session_id });
      }
      case "goal_finished":
        return this.push({ kind: "notice", cls: "goal", text: `Goal ${p.outcome} after ${p.rounds} rounds (${p.tokens_used} tokens)` });
      default: return null;
    }
  }

  requestEnd(p, rec, live) {
    // What the history ends with decides the page's state after a (re)load.
    this.lastAuth = p.status === "auth" ? p.error_message || "authentication failed" : null;
    this.lastRetry = p.retry_in_ms !== undefined && p.retry_in_ms !== null ? { ms: p.retry_in_ms, at: Date.parse(rec.timestamp) } : null;
    if (p.status === "completed") return null;
    this.dropOpen();
    // An abort's request ends "aborted" and the abort event follows (R-CARRY-1): one notice.
    if (p.status === "aborted") return null;
    if (p.status === "auth" && live && this.cb.onAuthFailure) this.cb.onAuthFailure(this.lastAuth);
    if (this.lastRetry) {
      const block = this.push({ kind: "notice", cls: "retry", text: `[retry] attempt ${p.attempt ?? "?"} failed (${p.status}${p.error_message ? `: ${p.error_message}` : ""}), next in ${p.retry_in_ms} ms` });
      if (live && this.cb.onRetryWait) this.cb.onRetryWait(p, rec, block);
      return block;
    }
    return this.push({ kind: "notice", cls: "error", text: `Request ended: ${p.status}${p.error_message ? ` — ${p.error_message}` : ""}` });
  }

  lastRunningTool() {
    for (let i = this.blocks.length - 1; i >= 0; i -= 1) {
      const b = this.blocks[i];
      if (b.kind === "tool" && !b.done) return b;
    }
    return null;
  }

  /** The tool block a child session nests under: the one it was given, else the earliest
   * run_subagent call still running without a child (the order the engine writes the
   * pointers in, R-SUB-3; the span tree links them the same way), else the last running call. */
  subagentHost(child) {
    let host = this.subHosts.get(child);
    if (host) return host;
    host = this.blocks.find((b) => b.kind === "tool" && b.name === "run_subagent" && !b.done && !b.child)
      || this.lastRunningTool();
    if (!host) return null;
    this.subHosts.set(child, host);
    host.child = child;
    return host;
  }

  nestedApproval(call, origin) {
    const host = this.subagentHost(origin[0]);
    if (!host) return null;
    const who = origin.join("/");
    if (host.children.some((c) => c.type === "approval" && c.pending && c.id === call.tool_call_id && c.who === who)) return host;
    host.children.push({ role: "approval", type: "approval", id: call.tool_call_id, who, pending: true, text: `${call.name} ${call.arguments}` });
    this.refresh(host);
    return host;
  }

  /** A subagent's message (R-SUB-1: origin names the child first): its text streams under
   * its call, its tool calls and outputs show as one line each. */
  addNested(rec) {
    const p = rec.payload || {};
    const host = this.subagentHost(rec.origin[0]);
    if (!host) return null;
    if (!host.done) host.running = true;  // its subagent is at work
    if (rec.type === "session_meta") { this.refresh(host); return host; }
    if (rec.type === "event_msg" && p.type === "approval_decision") {  // its approval answered
      const who = rec.origin.join("/");
      const asked = host.children.find((c) => c.type === "approval" && c.pending && c.id === p.tool_call_id && c.who === who);
      if (asked) { Object.assign(asked, { pending: false, decision: p.decision }); this.refresh(host); }
      return host;
    }
    if (rec.type !== "model_msg") return null;
    const key = `${rec.origin.join("/")} ${p.type === "partial_thinking" || p.type === "thinking" ? "thinking" : "text"}`;
    host.streams = host.streams || new Map();
    if (p.type === "partial_text" || p.type === "partial_thinking") {
      const content = (p.type === "partial_text" ? p.text : p.thinking) || "";
      let entry = host.streams.get(key);
      if (p.event_type === "stop") return host;
      if (!entry || p.event_type === "start") {
        entry = { role: p.role || "assistant", type: p.type.slice(8), text: content, streaming: true };
        host.streams.set(key, entry);
        host.children.push(entry);
        trimNested(host);
        this.refresh(host);
      } else if (content) {
        entry.text += content;
        if (entry.node && entry.node.isConnected) setText(entry.node, visible(entry.text));
        else this.refresh(host);
      }
      return host;
    }
    if (p.type && p.type.startsWith("partial_")) return null;
    const text = p.type === "tool_call" ? `→ ${p.name} ${p.arguments}`
      : p.type === "tool_call_output" ? `← ${p.output}`
        : p.text ?? p.thinking ?? "";
    const open = (p.type === "text" || p.type === "thinking") ? host.streams.get(key) : null;
    if (open) {  // the complete message replaces what streamed
      host.streams.delete(key);
      Object.assign(open, { text, streaming: false });
    } else {
      host.children.push({ role: p.role, type: p.type, text });
      trimNested(host);
    }
    this.refresh(host);
    return host;
  }

  /** Re-renders a streaming block's Markdown at the next frame (a burst of deltas: once). */
  redraw(block) {
    this.dirty.add(block);
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = null;
      for (const b of this.dirty) if (b.streaming && b.live) b.live.replaceChildren(streamingMarkdown(b.text));
      this.dirty.clear();
    });
  }

  /** After `resync_required` (the server restarted, or its buffer was lost) some fragments
   * are gone: a half-shown segment takes no more deltas and waits for its complete message. */
  staleOpen() {
    for (const block of this.open.values()) if (block.streaming) block.stale = true;
  }

  /** The session is idle: a segment still open was never recorded (the server stopped in the
   * middle of it), so it stays on the page, marked interrupted, instead of vanishing. */
  interruptOpen() {
    for (const block of this.open.values()) this.interrupt(block);
    this.open.clear();
    for (const block of this.tools.values()) {
      if (!block.done && (block.streaming || block.running || block.pending)) {
        Object.assign(block, { streaming: false, running: false, pending: false, interrupted: true });
        this.refresh(block);
      }
      if (block.streams && block.streams.size) {  // a subagent's text the stream never completed
        for (const entry of block.streams.values()) entry.streaming = false;
        block.streams.clear();
        this.refresh(block);
      }
    }
  }

  interrupt(block) {
    if (!block.streaming) return;
    if (!block.text.trim()) { this.remove(block); return; }
    Object.assign(block, { streaming: false, stale: false, interrupted: true });
    this.refresh(block);
  }

  /** A steering message the server accepted: shown as queued until the engine delivers it. */
  queueSteer(text, images) {
    const block = this.push({ kind: "user", text, images: [], pasted: images.length, steer: true, queued: true });
    this.steers.push(block);
    return block;
  }

  /** The run ended: steering it never delivered was discarded (R-STEER-8). */
  dropSteers() {
    for (const block of this.steers.splice(0)) {
      Object.assign(block, { queued: false, dropped: true });
      this.refresh(block);
    }
  }

  remove(block) {
    const i = this.blocks.indexOf(block);
    if (i < 0) return;
    this.blocks.splice(i, 1);
    if (i < this.first) this.first -= 1;
    if (block.node) block.node.remove();
  }

  /** Drops half-shown fragments (an abort or a failed request: the trace says what stays). */
  dropOpen() {
    for (const block of this.open.values()) {
      const i = this.blocks.indexOf(block);
      if (i >= 0 && block.streaming) {
        this.blocks.splice(i, 1);
        if (i < this.first) this.first -= 1;
        if (block.node) block.node.remove();
      }
    }
    this.open.clear();
  }

  setIdle(idle) {
    if (this.idle === idle) return;
    this.idle = idle;
    for (let i = this.first; i < this.blocks.length; i += 1) {
      if (this.blocks[i].kind === "assistant") this.refresh(this.blocks[i]);
    }
  }

  // ------------------------------------------------------------------ rendering

  push(block) {
    this.blocks.push(block);
    if (this.loaded !== false) this.list.append(this.node(block));
    return block;
  }

  refresh(block) {
    if (!block.node) return;
    const old = block.node;
    block.node = null;
    old.replaceWith(this.node(block));
  }

  showEarlier() {
    if (this.first === 0) return;
    const scroller = this.el.closest(".scroll") || document.scrollingElement;
    const before = scroller.scrollHeight;
    const start = Math.max(0, this.first - PAGE);
    const frag = document.createDocumentFragment();
    for (let i = start; i < this.first; i += 1) frag.append(this.node(this.blocks[i]));
    this.list.prepend(frag);
    this.first = start;
    scroller.scrollTop += scroller.scrollHeight - before;
    this.updateMore();
  }

  updateMore() {
    this.more.hidden = this.first === 0;
    setText(this.more, `Show ${Math.min(PAGE, this.first)} earlier messages (${this.first} not shown)`);
  }

  node(block) {
    if (block.node) return block.node;
    const el = RENDER[block.kind](block, this);
    el.classList.add("block", `b-${block.kind}`);
    if (block.position) el.dataset.position = `${block.position.file}:${block.position.ordinal}`;
    block.node = el;
    return el;
  }
}

function imageSrc(sessionId, target) {
  if (/^data:image\//i.test(target)) return target;
  const name = target.split("/").pop();
  return `/api/sessions/${encodeURIComponent(sessionId)}/scratchpad/${encodeURIComponent(name)}`;
}

function shot(alt, url) {
  return authImage(h("img", { class: "shot", alt }), url);
}

const RENDER = {
  user(b, t) {
    return h("div", { class: `msg user${b.queued ? " pending" : ""}` },
      h("div", { class: "who" }, "You", b.steer ? h("span", { class: "tag steer" }, "steering") : null,
        b.queued ? h("span", { class: "tag queued", title: "Delivered to the model after the current turn" }, "queued") : null,
        b.dropped ? h("span", { class: "tag dropped", title: "The task ended before this steering message was delivered; send it as a new message" }, "not delivered: the task ended first") : null,
        b.pasted ? h("span", { class: "muted small" }, `${b.pasted} image${b.pasted > 1 ? "s" : ""}`) : null,
        b.goal ? h("span", { class: "tag goal-round" }, `goal round ${b.goal.round}`) : null),
      b.goal ? h("details", { class: "goal-block" }, h("summary", null, "goal instructions"),
        h("pre", null, visible(b.goal.block))) : null,
      h("div", { class: "body plain" }, visible(b.text)),
      b.images.map((img) => shot("attached image", imageSrc(t.sessionId, img))));
  },
  assistant(b, t) {
    if (b.streaming) {
      b.live = h("div", { class: "body md" }, streamingMarkdown(b.text));
      return h("div", { class: "msg assistant streaming", "aria-busy": "true" }, h("div", { class: "who" }, "Assistant"),
        b.live, h("span", { class: "cursor", "aria-hidden": "true" }, "▍"));
    }
    b.live = null;
    if (b.interrupted) {
      return h("div", { class: "msg assistant interrupted" },
        h("div", { class: "who" }, "Assistant", h("span", { class: "tag interrupted" }, "interrupted"),
          h("span", { class: "muted small" }, "the server stopped before this answer was recorded")),
        h("div", { class: "body md" }, markdown(b.text || "")));
    }
    const forkable = t.idle && b.position && b.stop === "completed";
    return h("div", { class: "msg assistant" },
      h("div", { class: "who" }, "Assistant",
        b.stop && b.stop !== "completed" ? h("span", { class: "tag warn" }, b.stop) : null,
        forkable ? h("button", { class: "link fork", title: "Start a new session from this reply", onclick: () => t.cb.onFork(b.position) }, "Fork from here") : null,
        forkable ? h("button", { class: "link rewind", title: "Put the workspace back as it was after this reply and continue from here in a new session", onclick: () => t.cb.onRewind(b.position) }, "Rewind to here") : null),
      h("div", { class: "body md" }, markdown(b.text || "")));
  },
  thinking(b) {
    if (b.streaming) b.live = document.createTextNode(visible(b.text));
    else b.live = null;
    return h("details", { class: "thinking" }, h("summary", null, b.streaming ? "Thinking…" : "Thinking"),
      h("div", { class: "body plain" }, b.streaming ? b.live : visible(b.text)));
  },
  tool(b, t) {
    const state = b.interrupted ? "interrupted" : b.pending ? "awaiting approval" : b.decision === "deny" ? "denied"
      : b.done ? (b.outStop && b.outStop !== "completed" ? b.outStop : "done")
        : b.running ? "running" : b.streaming ? "streaming" : "queued";
    return h("div", { class: `tool state-${state.replace(/\s/g, "-")}`, dataset: { callId: b.id } },
      h("div", { class: "tool-head" },
        h("span", { class: "tool-name" }, visible(b.name)),
        b.parallel ? h("span", { class: "tag parallel" }, b.parallel) : null,
        h("span", { class: "tag" }, state),
        b.decision ? h("span", { class: `tag decision ${b.decision}` }, b.decision === "allow" ? "approved" : "denied") : null,
        h("span", { class: "muted small" }, b.id)),
      h("pre", { class: "args" }, visible(prettyArgs(b.args))),
      b.pending ? h("div", { class: "approval" },
        h("span", null, "This call needs your approval."),
        h("button", { class: "primary approve", onclick: () => t.cb.onDecide(b.id, "allow") }, "Approve"),
        h("button", { class: "danger deny", onclick: () => t.cb.onDecide(b.id, "deny") }, "Deny")) : null,
      // Shown once there is output, or the call is done (an empty output box while it runs says nothing).
      b.output || (b.done && b.output !== null && b.output !== undefined) ? h("pre", { class: "output" }, visible(b.output)) : null,
      (b.images || []).map((img) => shot("tool image", imageSrc(t.sessionId, img))),
      b.child || b.children.length ? h("div", { class: "nested", dataset: b.child ? { child: b.child } : {} },
        h("div", { class: "muted small" }, "Subagent ",
          b.child ? h("a", { href: `#/s/${encodeURIComponent(b.child)}` }, b.child) : null,
          b.hiddenNested ? ` · ${b.hiddenNested} earlier lines on its own page` : null),
        b.children.map((c) => nestedNode(c, t))) : null);
  },
  folded(b) {
    return h("details", { class: "folded" }, h("summary", null, b.label),
      h("div", { class: "body plain" }, visible(b.text)));
  },
  image(b, t) {
    return h("div", { class: `msg ${b.role}` }, shot("image", imageSrc(t.sessionId, b.src)));
  },
  notice(b) {
    return h("div", { class: `notice ${b.cls}` }, visible(b.text),
      b.link ? h("a", { href: `#/s/${encodeURIComponent(b.link)}` }, " open") : null);
  },
};

/** Keeps a call's subagent lines to the latest NESTED (a long child would make every refresh
 * of its call slower); what is still streaming or waiting for approval stays. */
function trimNested(host) {
  let extra = host.children.length - NESTED;
  if (extra <= 0) return;
  const kept = [];
  for (const c of host.children) {
    if (extra > 0 && !c.streaming && !c.pending) {
      extra -= 1;
      host.hiddenNested = (host.hiddenNested || 0) + 1;
    } else kept.push(c);
  }
  host.children = kept;
}

/** One line under a subagent's call: its text (streaming or not), a tool call or output, or an
 * approval its tool call waits for. */
function nestedNode(c, t) {
  if (c.type === "approval") {
    c.node = h("div", { class: `nested-msg approval${c.pending ? " pending" : ""}` },
      h("span", { class: "tag" }, c.pending ? "awaiting approval" : c.decision === "allow" ? "approved" : "denied"), " ",
      visible(c.text),
      c.pending ? h("span", { class: "approval" },
        h("button", { class: "primary approve", "aria-label": `Approve the subagent's call ${c.id}`, onclick: () => t.cb.onDecide(c.id, "allow") }, "Approve"),
        h("button", { class: "danger deny", "aria-label": `Deny the subagent's call ${c.id}`, onclick: () => t.cb.onDecide(c.id, "deny") }, "Deny")) : null);
    return c.node;
  }
  c.node = h("div", { class: `nested-msg ${c.role} t-${c.type}${c.streaming ? " streaming" : ""}`, "aria-busy": c.streaming ? "true" : null }, visible(c.text));
  return c.node;
}

function prettyArgs(args) {
  if (!args) return "";
  try { return JSON.stringify(JSON.parse(args), null, 2); } catch (_) { return args; }
}
