#!/usr/bin/env node
// Drives the REAL, unmodified chat client -- `useAgent` from `agents/react`
// and `useAgentChat` from `@cloudflare/ai-chat/react` -- against a running
// server, with React rendering through react-test-renderer (no DOM, no
// browser, no bundler).
//
// Usage:
//   node drive.mjs --base http://127.0.0.1:PORT --agent assistant --name NAME \
//     --steps '[{"send":"hi"},{"waitText":"Hello!"},{"waitStatus":"ready"},
//               {"remount":true},{"waitMessages":2},{"dump":true}]' \
//     [--timeout 30000] [--step-timeout 10000] [--frames] [--root concurrent|legacy] [--session ID]
//
// --timeout bounds the whole run, --step-timeout each waiting step; --frames
// also prints every WebSocket frame; --root picks React's root type
// (concurrent, as createRoot in a browser, is the default).
//
// Output: one JSON object per line on stdout, each with "ev" (what was
// observed) and "t" (ms since start). Exit status 0 when every step passed,
// 1 on any failure (a step timed out, an exception, the global timeout),
// 2 on bad arguments. The last line is {"ev":"end","ok":true|false,...}.
//
// Steps (objects, run in order; each may carry "timeout" in ms):
//   {"send": "text"}          wait until settled (mounted, socket open, the
//                             hook's resume probe answered), then
//                             wait "quietMs" (default 250: the hook ends its
//                             mount-time resume a few ms after the probe's
//                             answer), then sendMessage({text}) (not
//                             awaited); "settle": false skips both waits
//   {"waitSettled": true}     wait until settled (see "send")
//   {"waitText": "Hello!"}    wait until an assistant message's text parts
//                             joined equal the string
//   {"waitStatus": "ready"}   wait until the hook's `status` equals it
//   {"waitIdle": true}        status "ready" and not isServerStreaming
//   {"waitMessages": 2}       wait until at least N messages are shown
//   {"waitTurnEnd": 1}        wait until onTurnEnd fired N times on this mount
//   {"waitOpen": true}        wait until mounted and the socket is open
//   {"remount": true}         unmount the whole tree (closes the socket),
//                             then mount a fresh one (new socket, new _pk,
//                             get-messages fetched again) = a page reload
//   {"unmount": true} / {"mount": true}   the two halves of remount
//   {"stop": true}            call stop()
//   {"clear": true}           call clearHistory()
//   {"sleep": 200}            wait that many ms
//   {"dump": true}            print the messages (also printed after every step)
//
// Tools (the hook's own APIs: `onToolCall` + its `addToolOutput`, and
// `addToolApprovalResponse`; `autoContinueAfterToolResult` stays at its
// default, true, so the server continues the turn by itself):
//   {"answerTool": {"toolName": "getLocation", "output": {...}}}
//                             register how the `onToolCall` callback answers
//                             calls of that tool (register before "send");
//                             optional "delayMs" before answering, and
//                             "state": "output-error" + "errorText" to answer
//                             with an error. Calls of a tool with no
//                             registered answer are reported and left open.
//   {"approve": true} / {"approve": false}
//                             wait for a tool part in state
//                             "approval-requested" (optional "toolName"), then
//                             call addToolApprovalResponse({id: part.approval.id,
//                             approved}); "whenIdle": true first waits until
//                             status is "ready" and no server stream runs (by
//                             default it answers as soon as the part shows,
//                             which can be before the asking turn has ended)
//   {"toolOutput": {"toolName": "getLocation", "output": {...}}}
//                             wait for a tool part in "input-available", then
//                             call the hook's top-level addToolOutput for it
//   {"waitPart": {"toolName": "getLocation", "state": "output-available"}}
//                             wait until a tool part of that tool (any tool
//                             without "toolName") is in that state
//
// Network:
//   {"delayRecv": {"afterChunk": "tool-approval-request", "ms": 300}}
//                             once (register before "send"): when a frame with
//                             a chunk of that type arrives, the frames after
//                             it reach the client `ms` later, in order, like a
//                             latency spike. "recv" events still show arrival
//                             order (flagged "held"); "hold" and "release"
//                             events bracket the delay.
//   {"delaySend": {"type": "cf_agent_stream_resume_request",
//                  "afterType": "cf_agent_tool_approval", "ms": 100}}
//                             once (register before "send"): the first frame of
//                             that type sent after a frame of type afterType
//                             (any time without it) leaves `ms` later; frames
//                             sent meanwhile wait behind it. "send" events show
//                             when the client sent (flagged "held");
//                             "hold-send"/"release-send" bracket the delay.
//
// Events printed: start, ws (open/close, and send/recv frames with --frames),
// http (fetch calls: get-messages), identity, suspended, mount, status, text
// (latest assistant text when it changes), flags (isServerStreaming,
// isToolContinuation, isStreaming when they change), part (a tool part's
// state when it changes), tool-call (onToolCall fired), tool-output (the
// driver answered through addToolOutput), approval (the driver called
// addToolApprovalResponse), finish (AI SDK onFinish), turn-end (agents
// onTurnEnd), messages, error, console, step, step-done, unmount, fatal, end.

import process from "node:process";
import { parseArgs } from "node:util";
import { emit, errInfo, fatal, finish, isFinished } from "./events.mjs";

let mountSeq = 0;

// ── arguments ──────────────────────────────────────────────────────────
let args;
try {
  ({ values: args } = parseArgs({
    options: {
      base: { type: "string", default: "http://127.0.0.1:8000" },
      agent: { type: "string", default: "assistant" },
      name: { type: "string", default: "default" },
      steps: { type: "string", default: "[]" },
      timeout: { type: "string", default: "30000" },
      "step-timeout": { type: "string", default: "10000" },
      frames: { type: "boolean", default: false },
      root: { type: "string", default: "concurrent" },
      session: { type: "string", default: "" }
    },
    strict: true
  }));
} catch (e) {
  emit("fatal", { where: "args", ...errInfo(e) });
  process.exit(2);
}

let steps;
let base;
try {
  steps = JSON.parse(args.steps);
  if (!Array.isArray(steps)) throw new Error("--steps must be a JSON array");
  base = new URL(args.base);
  if (!/^(http|https|ws|wss):$/.test(base.protocol)) {
    throw new Error(`--base must be http(s) or ws(s), got ${base.protocol}`);
  }
} catch (e) {
  emit("fatal", { where: "args", ...errInfo(e) });
  process.exit(2);
}
const GLOBAL_TIMEOUT = Number(args.timeout);
const STEP_TIMEOUT = Number(args["step-timeout"]);
const secure = base.protocol === "https:" || base.protocol === "wss:";

setTimeout(() => {
  emit("fatal", { where: "global-timeout", error: `global timeout after ${GLOBAL_TIMEOUT} ms` });
  finish(false, { reason: "global-timeout" });
}, GLOBAL_TIMEOUT).unref?.();
// Keep the event loop alive until finish() even when nothing else is pending.
const keepAlive = setInterval(() => {}, 1 << 30);

// ── observation hooks installed BEFORE the client is loaded ───────────
// Console output of the client/React becomes JSON lines.
const KNOWN_NOISE = [/react-test-renderer is deprecated/];
for (const level of ["log", "info", "warn", "error", "debug"]) {
  console[level] = (...parts) => {
    const text = parts
      .map((p) => (p instanceof Error ? p.stack : typeof p === "string" ? p : safeJson(p)))
      .join(" ");
    if (KNOWN_NOISE.some((re) => re.test(text))) return;
    emit("console", { level, text: text.slice(0, 4000) });
  };
}
function safeJson(v) {
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}

// The client (PartySocket) uses the global WebSocket (Node >= 22 has one).
// A transparent subclass reports opens, closes and (with --frames) frames.
if (typeof globalThis.WebSocket !== "function") {
  emit("fatal", { where: "env", error: `no global WebSocket in Node ${process.version}` });
  process.exit(1);
}
const NativeWebSocket = globalThis.WebSocket;
let wsSeq = 0;
// Resume probes per socket: the hook sends `cf_agent_stream_resume_request`
// with a probeId on mount/reconnect; the server answers echoing it.
const probes = new Map(); // conn -> Map(probeId -> answered?)
let latestConn = { mount: 0, conn: 0 };
function probeId(raw, type) {
  if (typeof raw !== "string" || !raw.includes("probeId")) return null;
  try {
    const f = JSON.parse(raw);
    if (type && f.type !== type) return null;
    return typeof f.probeId === "string" ? f.probeId : null;
  } catch {
    return null;
  }
}
// Latency on demand (the "delayRecv" step): once a frame carrying a chunk of
// the given type arrives, the frames after it reach the client only `ms`
// later, in order -- as over a slow network. "recv" events keep the arrival
// order (what the server sent when); "held"/"release" events mark the delay.
const recvDelays = []; // [{afterChunk, ms, used}]
// The other direction (the "delaySend" step): a frame of the given type, once
// a frame of type `afterType` was sent, leaves `ms` later, and every frame
// sent after it waits behind it.
const sendDelays = []; // [{type, afterType, ms, armed, used}]
function frameType(raw) {
  if (typeof raw !== "string") return null;
  try {
    return JSON.parse(raw).type ?? null;
  } catch {
    return null;
  }
}
function chunkType(raw) {
  if (typeof raw !== "string" || !raw.includes("cf_agent_use_chat_response")) return null;
  try {
    const f = JSON.parse(raw);
    return f.body ? JSON.parse(f.body).type ?? null : null;
  } catch {
    return null;
  }
}
class ObservedWebSocket extends NativeWebSocket {
  constructor(url, protocols) {
    super(url, protocols);
    const conn = ++wsSeq;
    const mount = mountSeq;
    latestConn = { mount, conn };
    probes.set(conn, new Map());
    this._observedConn = conn;
    this._wrapped = new Map(); // the client's message listener -> the gated one
    this._gate = { holding: false, trigger: null, queue: [] };
    emit("ws", { dir: "connect", conn, mount, url: String(url) });
    super.addEventListener("open", () => emit("ws", { dir: "open", conn, mount }));
    super.addEventListener("close", (e) =>
      emit("ws", { dir: "close", conn, mount, code: e.code, reason: e.reason, wasClean: e.wasClean })
    );
    super.addEventListener("error", () => emit("ws", { dir: "error", conn, mount }));
    // Registered before the client's listeners, so it sees every frame first.
    super.addEventListener("message", (e) => {
      const id = probeId(e.data);
      if (id !== null && probes.get(conn).has(id)) {
        probes.get(conn).set(id, true);
        ctl.notify();
      }
      if (args.frames) {
        const held = this._gate.holding ? { held: true } : {};
        emit("ws", { dir: "recv", conn, raw: typeof e.data === "string" ? e.data : "<binary>", ...held });
      }
      const type = chunkType(e.data);
      const delay = type === null ? undefined : recvDelays.find((d) => !d.used && d.afterChunk === type);
      if (delay !== undefined && !this._gate.holding) {
        delay.used = true;
        this._gate.holding = true;
        this._gate.trigger = e;
        emit("ws", { dir: "hold", conn, afterChunk: type, ms: delay.ms });
        setTimeout(() => this._release(), delay.ms);
      }
    });
  }
  _release() {
    const gate = this._gate;
    const queued = gate.queue;
    gate.holding = false;
    gate.trigger = null;
    gate.queue = [];
    emit("ws", { dir: "release", conn: this._observedConn, deliveries: queued.length });
    for (const deliver of queued) deliver();
  }
  addEventListener(type, listener, options) {
    if (type !== "message" || typeof listener !== "function") {
      return super.addEventListener(type, listener, options);
    }
    let gated = this._wrapped.get(listener);
    if (gated === undefined) {
      const gate = this._gate;
      gated = function (e) {
        if (gate.holding && e !== gate.trigger) {
          gate.queue.push(() => listener.call(this, e));
        } else {
          listener.call(this, e);
        }
      };
      this._wrapped.set(listener, gated);
    }
    return super.addEventListener(type, gated, options);
  }
  removeEventListener(type, listener, options) {
    if (type === "message" && this._wrapped.has(listener)) {
      return super.removeEventListener(type, this._wrapped.get(listener), options);
    }
    return super.removeEventListener(type, listener, options);
  }
  send(data) {
    const id = probeId(data, "cf_agent_stream_resume_request");
    if (id !== null) probes.get(this._observedConn)?.set(id, false);
    const type = frameType(data);
    const delay = sendDelays.find((d) => d.armed && !d.used && d.type === type);
    const queued = this._sendQueue !== undefined || delay !== undefined;
    if (args.frames) {
      const held = queued ? { held: true } : {};
      emit("ws", { dir: "send", conn: this._observedConn, raw: typeof data === "string" ? data : "<binary>", ...held });
    }
    for (const d of sendDelays) if (!d.armed && d.afterType === type) d.armed = true;
    if (!queued) return super.send(data);
    if (this._sendQueue === undefined) {
      delay.used = true;
      this._sendQueue = [];
      emit("ws", { dir: "hold-send", conn: this._observedConn, type, ms: delay.ms });
      setTimeout(() => {
        const frames = this._sendQueue;
        this._sendQueue = undefined;
        emit("ws", { dir: "release-send", conn: this._observedConn, frames: frames.length });
        for (const f of frames) if (this.readyState === 1) super.send(f);
      }, delay.ms);
    }
    this._sendQueue.push(data);
  }
}
globalThis.WebSocket = ObservedWebSocket;

const nativeFetch = globalThis.fetch;
globalThis.fetch = async (input, init) => {
  const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
  try {
    const res = await nativeFetch(input, init);
    let body;
    try {
      body = await res.clone().text();
    } catch (e) {
      body = `<unreadable: ${e}>`;
    }
    emit("http", {
      method: init?.method ?? "GET",
      url,
      status: res.status,
      contentType: res.headers.get("content-type"),
      body: body.slice(0, 20000),
      mount: mountSeq
    });
    return res;
  } catch (e) {
    emit("http", { method: init?.method ?? "GET", url, mount: mountSeq, ...errInfo(e) });
    throw e;
  }
};

// ── load the real client ───────────────────────────────────────────────
let React, TestRenderer, useAgent, useAgentChat;
try {
  React = await import("react");
  TestRenderer = (await import("react-test-renderer")).default;
  ({ useAgent } = await import("agents/react"));
  ({ useAgentChat } = await import("@cloudflare/ai-chat/react"));
} catch (e) {
  fatal("import", e);
}
const h = React.createElement;
const { Suspense, useEffect, useLayoutEffect, useRef } = React;

// ── shared controller between React and the step runner ────────────────
const ctl = {
  mounted: false, // ChatView committed (Suspense resolved)
  open: false, // socket of the current mount is open
  mount: 0,
  chat: null, // latest useAgentChat() result
  turnEnds: [], // onTurnEnd events, all mounts
  toolAnswers: new Map(), // toolName -> {output, delayMs, state, errorText} for onToolCall
  listeners: new Set(),
  notify() {
    for (const fn of [...this.listeners]) fn();
  }
};

function messageText(m) {
  return (m.parts ?? [])
    .filter((p) => p.type === "text")
    .map((p) => p.text)
    .join("");
}

// Tool parts of the AI SDK's UIMessage: "tool-<name>" (static) or
// "dynamic-tool" (with toolName).
function isToolPart(p) {
  return typeof p?.type === "string" && (p.type.startsWith("tool-") || p.type === "dynamic-tool");
}
function toolNameOf(p) {
  return p.type === "dynamic-tool" ? p.toolName : p.type.slice("tool-".length);
}
function toolParts(messages, toolName) {
  const out = [];
  for (const m of messages ?? []) {
    for (const p of m.parts ?? []) {
      if (isToolPart(p) && (toolName === undefined || toolNameOf(p) === toolName)) out.push({ message: m, part: p });
    }
  }
  return out;
}

function snapshot(messages) {
  // Plain JSON copy of what the hook exposes.
  return JSON.parse(JSON.stringify(messages ?? []));
}

class ErrorBoundary extends React.Component {
  constructor(props) {
    super(props);
    this.state = { error: null };
  }
  static getDerivedStateFromError(error) {
    return { error };
  }
  componentDidCatch(error) {
    fatal("render", error);
  }
  render() {
    return this.state.error ? null : this.props.children;
  }
}

function Fallback({ mount }) {
  useLayoutEffect(() => {
    emit("suspended", { mount });
  }, [mount]);
  return null;
}

async function sessionMessages() {
  const origin = base.origin.replace(/^ws/, "http");
  const url = `${origin}/agents/${args.agent}/${args.name}/get-messages?session=${encodeURIComponent(args.session)}`;
  return (await fetch(url)).json();
}

function ChatView({ agent, mount }) {
  const chat = useAgentChat({
    agent,
    ...(args.session ? { getInitialMessages: sessionMessages } : {}),
    onError: (e) => emit("error", { mount, source: "onError", ...errInfo(e) }),
    // AI SDK: once per response stream this tab consumed.
    onFinish: ({ message, isAbort, isDisconnect, isError, finishReason }) =>
      emit("finish", {
        mount,
        messageId: message?.id ?? null,
        text: message ? messageText(message) : null,
        isAbort,
        isDisconnect,
        isError,
        finishReason: finishReason ?? null
      }),
    // agents: once per chat request that ends (from the server's terminal frame).
    onTurnEnd: (event) => {
      ctl.turnEnds.push({ mount, ...event });
      emit("turn-end", { mount, ...event });
      ctl.notify();
    },
    // agents: a tool call the client has to answer (no server execute).
    onToolCall: async ({ toolCall, addToolOutput }) => {
      const { toolCallId, toolName, input } = toolCall;
      const answer = ctl.toolAnswers.get(toolName);
      emit("tool-call", { mount, toolCallId, toolName, input, answered: answer !== undefined });
      ctl.notify();
      if (answer === undefined) return;
      if (answer.delayMs) await sleep(Number(answer.delayMs));
      const opts = { toolCallId, output: answer.output };
      if (answer.state !== undefined) opts.state = answer.state;
      if (answer.errorText !== undefined) opts.errorText = answer.errorText;
      addToolOutput(opts);
      emit("tool-output", { mount, via: "onToolCall", toolName, ...opts });
      ctl.notify();
    }
  });
  const prev = useRef({
    status: undefined,
    text: undefined,
    error: undefined,
    flags: undefined,
    parts: new Map(),
    first: true
  });

  useLayoutEffect(() => {
    const p = prev.current;
    ctl.chat = chat;
    if (p.first) {
      p.first = false;
      ctl.mounted = true;
      emit("mount", { mount, status: chat.status, messages: snapshot(chat.messages) });
    }
    if (chat.status !== p.status) {
      p.status = chat.status;
      emit("status", { mount, status: chat.status });
    }
    const lastAssistant = [...chat.messages].reverse().find((m) => m.role === "assistant");
    const text = lastAssistant ? messageText(lastAssistant) : undefined;
    if (lastAssistant && text !== p.text) {
      p.text = text;
      emit("text", { mount, id: lastAssistant.id, text });
    }
    const flags = {
      isServerStreaming: Boolean(chat.isServerStreaming),
      isToolContinuation: Boolean(chat.isToolContinuation),
      isStreaming: Boolean(chat.isStreaming)
    };
    const flagsKey = JSON.stringify(flags);
    if (flagsKey !== p.flags) {
      p.flags = flagsKey;
      emit("flags", { mount, ...flags });
    }
    for (const { message, part } of toolParts(chat.messages)) {
      const key = `${message.id}/${part.toolCallId}`;
      const seen = JSON.stringify([part.state, part.approval ?? null, part.output ?? null, part.errorText ?? null]);
      if (p.parts.get(key) !== seen) {
        p.parts.set(key, seen);
        emit("part", {
          mount,
          messageId: message.id,
          toolCallId: part.toolCallId,
          toolName: toolNameOf(part),
          state: part.state,
          approval: part.approval ?? null,
          output: part.output ?? null,
          errorText: part.errorText ?? null
        });
      }
    }
    const errMsg = chat.error ? String(chat.error.message ?? chat.error) : undefined;
    if (errMsg !== p.error) {
      p.error = errMsg;
      if (errMsg !== undefined) emit("error", { mount, source: "hook", error: errMsg });
    }
    ctl.notify();
  });

  useEffect(
    () => () => {
      if (ctl.mount === mount) {
        ctl.mounted = false;
        ctl.chat = null;
      }
    },
    [mount]
  );
  return null;
}

function App({ mount }) {
  const agent = useAgent({
    agent: args.agent,
    name: args.name,
    // --session: that session of the instance (`?session=`), its transcript loaded as the page does.
    ...(args.session ? { query: { session: args.session } } : {}),
    host: base.host,
    protocol: secure ? "wss" : "ws",
    onOpen: () => {
      if (ctl.mount === mount) ctl.open = true;
      ctl.notify();
    },
    onClose: () => {
      if (ctl.mount === mount) ctl.open = false;
      ctl.notify();
    },
    onIdentity: (name, agentName) => emit("identity", { mount, name, agent: agentName })
  });
  useEffect(() => {
    // The socket may already be open before this effect runs.
    if (agent.readyState === 1) ctl.open = true;
    ctl.notify();
  }, [agent]);
  return h(
    ErrorBoundary,
    null,
    h(Suspense, { fallback: h(Fallback, { mount }) }, h(ChatView, { agent, mount }))
  );
}

// ── renderer ───────────────────────────────────────────────────────────
let renderer = null;

function doMount() {
  mountSeq += 1;
  ctl.mount = mountSeq;
  ctl.mounted = false;
  ctl.open = false;
  ctl.chat = null;
  const el = h(App, { key: `mount-${mountSeq}`, mount: mountSeq });
  if (renderer === null) {
    renderer = TestRenderer.create(el, { unstable_isConcurrent: args.root !== "legacy" });
  } else {
    renderer.update(el);
  }
}

function doUnmount() {
  if (renderer === null) return;
  const mount = ctl.mount;
  renderer.update(null);
  ctl.mounted = false;
  ctl.open = false;
  ctl.chat = null;
  emit("unmount", { mount });
}

function waitFor(pred, timeoutMs, what) {
  return new Promise((resolve, reject) => {
    let done = false;
    const check = () => {
      if (done) return;
      let ok = false;
      try {
        ok = pred();
      } catch (e) {
        cleanup();
        reject(e);
        return;
      }
      if (ok) {
        cleanup();
        resolve();
      }
    };
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
    }, timeoutMs);
    const poll = setInterval(check, 25);
    function cleanup() {
      done = true;
      clearTimeout(timer);
      clearInterval(poll);
      ctl.listeners.delete(check);
    }
    ctl.listeners.add(check);
    check();
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function dumpMessages(i, kind = "messages") {
  emit(kind, {
    step: i,
    mount: ctl.mount,
    mounted: ctl.mounted,
    status: ctl.chat?.status ?? null,
    messages: ctl.chat ? snapshot(ctl.chat.messages) : null
  });
}

async function runStep(step, i) {
  const timeout = Number(step.timeout ?? STEP_TIMEOUT);
  const readyToUse = () => ctl.mounted && ctl.open && ctl.chat !== null;
  // Settled: the current mount's socket sent its resume probe(s) and every
  // one was answered -- what a person sees before they start typing.
  const settled = () => {
    if (!readyToUse() || latestConn.mount !== ctl.mount) return false;
    const p = probes.get(latestConn.conn);
    return p.size > 0 && [...p.values()].every(Boolean);
  };
  if ("send" in step) {
    if (step.settle === false) {
      await waitFor(readyToUse, timeout, "mounted chat with an open socket");
    } else {
      await waitFor(settled, timeout, "mounted chat, open socket, resume probe answered");
      // The hook finishes its mount-time resume a few ms after the probe's
      // answer (and then sets status "ready"); a person types later than that.
      await sleep(Number(step.quietMs ?? 250));
    }
    const p = ctl.chat.sendMessage({ text: String(step.send) });
    Promise.resolve(p).catch((e) => emit("error", { mount: ctl.mount, source: "sendMessage", ...errInfo(e) }));
  } else if ("waitText" in step) {
    const want = String(step.waitText);
    await waitFor(
      () => ctl.chat?.messages.some((m) => m.role === "assistant" && messageText(m) === want),
      timeout,
      `assistant text ${JSON.stringify(want)}`
    );
  } else if ("waitStatus" in step) {
    await waitFor(() => ctl.chat?.status === step.waitStatus, timeout, `status ${step.waitStatus}`);
  } else if ("waitIdle" in step) {
    await waitFor(
      () => ctl.chat?.status === "ready" && !ctl.chat.isServerStreaming,
      timeout,
      "idle (status ready, no server stream)"
    );
  } else if ("waitTurnEnd" in step) {
    const n = Number(step.waitTurnEnd);
    await waitFor(
      () => ctl.turnEnds.filter((e) => e.mount === ctl.mount).length >= n,
      timeout,
      `${n} onTurnEnd event(s) on this mount`
    );
  } else if ("waitMessages" in step) {
    const n = Number(step.waitMessages);
    await waitFor(() => (ctl.chat?.messages.length ?? -1) >= n, timeout, `${n} messages`);
  } else if ("waitOpen" in step) {
    await waitFor(readyToUse, timeout, "mounted chat with an open socket");
  } else if ("waitSettled" in step) {
    await waitFor(settled, timeout, "mounted chat, open socket, resume probe answered");
  } else if ("remount" in step) {
    doUnmount();
    await sleep(Number(step.gapMs ?? 100));
    doMount();
    await waitFor(readyToUse, timeout, "remounted chat with an open socket");
  } else if ("unmount" in step) {
    doUnmount();
  } else if ("mount" in step) {
    doMount();
    await waitFor(readyToUse, timeout, "mounted chat with an open socket");
  } else if ("stop" in step) {
    await waitFor(() => ctl.chat !== null, timeout, "mounted chat");
    await ctl.chat.stop();
  } else if ("clear" in step) {
    await waitFor(() => ctl.chat !== null, timeout, "mounted chat");
    ctl.chat.clearHistory();
  } else if ("answerTool" in step) {
    const spec = step.answerTool ?? {};
    if (typeof spec.toolName !== "string") throw new Error(`answerTool needs a toolName: ${JSON.stringify(step)}`);
    ctl.toolAnswers.set(spec.toolName, spec);
  } else if ("approve" in step) {
    const approved = Boolean(step.approve);
    const pending = () =>
      toolParts(ctl.chat?.messages, step.toolName).find(
        ({ part }) => part.state === "approval-requested" && typeof part.approval?.id === "string"
      );
    await waitFor(() => pending() !== undefined, timeout, "a tool part in state approval-requested");
    if (step.whenIdle) {
      // A person who answers only after the turn that asked has ended.
      await waitFor(
        () => ctl.chat?.status === "ready" && !ctl.chat.isServerStreaming && pending() !== undefined,
        timeout,
        "idle with a tool part in state approval-requested"
      );
    }
    const { message, part } = pending();
    emit("approval", {
      mount: ctl.mount,
      messageId: message.id,
      toolCallId: part.toolCallId,
      toolName: toolNameOf(part),
      id: part.approval.id,
      approved
    });
    ctl.chat.addToolApprovalResponse({ id: part.approval.id, approved });
  } else if ("toolOutput" in step) {
    const spec = step.toolOutput ?? {};
    const open = () =>
      toolParts(ctl.chat?.messages, spec.toolName).find(({ part }) => part.state === "input-available");
    await waitFor(() => open() !== undefined, timeout, "a tool part in state input-available");
    const { part } = open();
    const opts = { toolCallId: part.toolCallId, toolName: toolNameOf(part), output: spec.output };
    if (spec.state !== undefined) opts.state = spec.state;
    if (spec.errorText !== undefined) opts.errorText = spec.errorText;
    ctl.chat.addToolOutput(opts);
    emit("tool-output", { mount: ctl.mount, via: "addToolOutput", ...opts });
  } else if ("waitPart" in step) {
    const spec = step.waitPart ?? {};
    await waitFor(
      () => toolParts(ctl.chat?.messages, spec.toolName).some(({ part }) => part.state === spec.state),
      timeout,
      `a ${spec.toolName ?? "tool"} part in state ${spec.state}`
    );
  } else if ("delayRecv" in step) {
    const spec = step.delayRecv ?? {};
    if (typeof spec.afterChunk !== "string") throw new Error(`delayRecv needs afterChunk: ${JSON.stringify(step)}`);
    recvDelays.push({ afterChunk: spec.afterChunk, ms: Number(spec.ms ?? 300), used: false });
  } else if ("delaySend" in step) {
    const spec = step.delaySend ?? {};
    if (typeof spec.type !== "string") throw new Error(`delaySend needs a frame type: ${JSON.stringify(step)}`);
    const afterType = typeof spec.afterType === "string" ? spec.afterType : null;
    sendDelays.push({ type: spec.type, afterType, ms: Number(spec.ms ?? 100), armed: afterType === null, used: false });
  } else if ("sleep" in step) {
    await sleep(Number(step.sleep));
  } else if ("dump" in step) {
    dumpMessages(i, "dump");
  } else {
    throw new Error(`unknown step ${JSON.stringify(step)}`);
  }
}

async function main() {
  emit("start", {
    node: process.version,
    base: base.href,
    agent: args.agent,
    name: args.name,
    steps,
    versions: await packageVersions()
  });
  doMount();
  for (let i = 0; i < steps.length; i++) {
    const step = steps[i];
    const started = performance.now();
    emit("step", { i, step });
    try {
      await runStep(step, i);
    } catch (e) {
      dumpMessages(i);
      emit("fatal", { where: `step ${i}`, step, ...errInfo(e) });
      finish(false, { reason: `step ${i}`, failedStep: i });
      return;
    }
    emit("step-done", { i, ms: Math.round(performance.now() - started) });
    dumpMessages(i);
  }
  doUnmount();
  // Give the close frame a moment to leave.
  await sleep(100);
  clearInterval(keepAlive);
  finish(true);
}

async function packageVersions() {
  const { readFile } = await import("node:fs/promises");
  const out = {};
  for (const name of ["agents", "@cloudflare/ai-chat", "ai", "@ai-sdk/react", "react", "react-test-renderer"]) {
    try {
      const url = new URL(`./node_modules/${name}/package.json`, import.meta.url);
      out[name] = JSON.parse(await readFile(url, "utf8")).version;
    } catch {
      out[name] = null;
    }
  }
  return out;
}

if (!isFinished()) {
  main().catch((e) => fatal("main", e));
}
