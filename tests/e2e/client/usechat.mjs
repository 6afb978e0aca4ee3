#!/usr/bin/env node
// Drives the AI SDK's own `useChat` (@ai-sdk/react) with its default HTTP
// transport (`DefaultChatTransport` from `ai`), unmodified, against a running
// server's `POST /agents/{agent}/{name}/chat`, with React rendering through
// react-test-renderer (as drive.mjs does for the Agents hook).
//
// Usage:
//   node usechat.mjs --base http://127.0.0.1:PORT --agent my-agent --name NAME --chat CHAT \
//     --steps '[{"mount":{}},{"send":"hi"},{"waitText":"Hello!"},{"dump":true}]' [--last-only]
//
// --last-only: prepareSendMessagesRequest sends only the last message (the AI SDK's
// documented pattern where the server holds the history).
//
// Output: one JSON object per line ("ev", "t"); exit 0 when every step passed.
//
// Steps (each may carry "timeout" in ms):
//   {"mount": {"resume": true}}  fetch get-messages?session=CHAT (as an app loads its chat), then mount
//                                useChat with them; "resume" passes resume: true (a reload)
//   {"unmount": true}             unmount (the fetch in flight is aborted: a disconnect)
//   {"send": "text"}              sendMessage({text})
//   {"waitText": "..."}           the last assistant message's text equals it
//   {"waitTextStarts": "..."}     ... starts with it
//   {"waitStatus": "ready"}       status equals it
//   {"waitPart": {"toolName": T, "state": S}}
//   {"answerTool": {"toolName": T, "output": ...}}  how onToolCall answers (addToolOutput)
//   {"approve": true|false}       wait for a part in approval-requested, then addToolApprovalResponse
//   {"stop": true}                stop() (the fetch ends) and POST .../chat/CHAT/stop (the turn ends)
//   {"sleep": ms}, {"dump": true}
//
// Events: start, http (method, url, status, body sent), mount, status, text, part, finish, error,
// tool-call, approval, dump, step, step-done, fatal, end.

import process from "node:process";
import { parseArgs } from "node:util";
import { emit, errInfo, fatal, finish } from "./events.mjs";


const { values: args } = parseArgs({
  options: {
    base: { type: "string", default: "http://127.0.0.1:8000" },
    agent: { type: "string", default: "my-agent" },
    name: { type: "string", default: "default" },
    chat: { type: "string", default: "chat" },
    steps: { type: "string", default: "[]" },
    timeout: { type: "string", default: "30000" },
    "step-timeout": { type: "string", default: "10000" },
    "last-only": { type: "boolean", default: false }
  },
  strict: true
});
const steps = JSON.parse(args.steps);
const STEP_TIMEOUT = Number(args["step-timeout"]);
const API = `${args.base}/agents/${args.agent}/${args.name}/chat`;
setTimeout(() => fatal("global-timeout", new Error("global timeout")), Number(args.timeout)).unref?.();
const keepAlive = setInterval(() => {}, 1 << 30);
for (const level of ["log", "info", "warn", "error", "debug"]) {
  console[level] = (...parts) => {
    const text = parts.map((p) => (p instanceof Error ? p.stack : String(p))).join(" ");
    if (!/react-test-renderer is deprecated/.test(text)) emit("console", { level, text: text.slice(0, 2000) });
  };
}

const nativeFetch = globalThis.fetch;
globalThis.fetch = async (input, init) => {
  const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
  const method = init?.method ?? "GET";
  try {
    const res = await nativeFetch(input, init);
    emit("http", { method, url, status: res.status, sent: typeof init?.body === "string" ? init.body : null });
    return res;
  } catch (e) {
    emit("http", { method, url, ...errInfo(e) });
    throw e;
  }
};

let React, TestRenderer, useChat, ai;
try {
  React = await import("react");
  TestRenderer = (await import("react-test-renderer")).default;
  ({ useChat } = await import("@ai-sdk/react"));
  ai = await import("ai");
} catch (e) {
  fatal("import", e);
}
const h = React.createElement;
const { useLayoutEffect, useRef, useMemo } = React;

const ctl = {
  chat: null,
  mount: 0,
  toolAnswers: new Map(),
  listeners: new Set(),
  notify() {
    for (const fn of [...this.listeners]) fn();
  }
};
const text = (m) => (m?.parts ?? []).filter((p) => p.type === "text").map((p) => p.text).join("");
const isTool = (p) => typeof p?.type === "string" && (p.type.startsWith("tool-") || p.type === "dynamic-tool");
const toolName = (p) => (p.type === "dynamic-tool" ? p.toolName : p.type.slice(5));
const lastAssistant = (messages) => [...(messages ?? [])].reverse().find((m) => m.role === "assistant");
const snapshot = (messages) => JSON.parse(JSON.stringify(messages ?? []));

function ChatView({ mount, initial, resume }) {
  const transport = useMemo(
    () =>
      new ai.DefaultChatTransport({
        api: API,
        prepareSendMessagesRequest: args["last-only"]
          ? ({ id, messages, trigger, messageId }) => ({
              body: { id, messages: messages.slice(-1), trigger, messageId }
            })
          : undefined
      }),
    []
  );
  const chat = useChat({
    id: args.chat,
    messages: initial,
    resume,
    transport,
    sendAutomaticallyWhen: (o) =>
      ai.lastAssistantMessageIsCompleteWithApprovalResponses(o) || ai.lastAssistantMessageIsCompleteWithToolCalls(o),
    onError: (e) => emit("error", { mount, source: "onError", ...errInfo(e) }),
    onFinish: ({ message, isAbort, isDisconnect, isError }) =>
      emit("finish", { mount, messageId: message?.id ?? null, text: text(message), isAbort, isDisconnect, isError }),
    onToolCall: async ({ toolCall }) => {
      const answer = ctl.toolAnswers.get(toolCall.toolName);
      emit("tool-call", { mount, toolCallId: toolCall.toolCallId, toolName: toolCall.toolName });
      if (answer === undefined) return;
      // Not awaited, as the AI SDK's docs show: awaiting it here would deadlock the stream's job queue.
      ctl.chat.addToolOutput({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId, output: answer.output });
    }
  });
  const prev = useRef({ status: undefined, text: undefined, parts: new Map(), first: true });
  useLayoutEffect(() => {
    const p = prev.current;
    ctl.chat = chat;
    if (p.first) {
      p.first = false;
      emit("mount", { mount, messages: snapshot(chat.messages) });
    }
    if (chat.status !== p.status) emit("status", { mount, status: (p.status = chat.status) });
    const last = lastAssistant(chat.messages);
    if (last && text(last) !== p.text) emit("text", { mount, id: last.id, text: (p.text = text(last)) });
    for (const m of chat.messages) {
      for (const part of m.parts ?? []) {
        if (!isTool(part)) continue;
        const key = `${m.id}/${part.toolCallId}`;
        const seen = JSON.stringify([part.state, part.output ?? null]);
        if (p.parts.get(key) !== seen) {
          p.parts.set(key, seen);
          emit("part", { mount, toolCallId: part.toolCallId, toolName: toolName(part), state: part.state });
        }
      }
    }
    if (chat.error) emit("error", { mount, source: "hook", error: String(chat.error.message ?? chat.error) });
    ctl.notify();
  });
  return null;
}

let renderer = null;
function waitFor(pred, what, timeout = STEP_TIMEOUT) {
  return new Promise((resolve, reject) => {
    const check = () => {
      let v;
      try {
        v = pred();
      } catch (e) {
        return done(() => reject(e));
      }
      if (v) done(() => resolve(v));
    };
    const done = (fn) => {
      ctl.listeners.delete(check);
      clearTimeout(timer);
      fn();
    };
    const timer = setTimeout(() => done(() => reject(new Error(`timed out waiting for ${what}`))), timeout);
    ctl.listeners.add(check);
    check();
  });
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function runStep(step) {
  const timeout = step.timeout ?? STEP_TIMEOUT;
  if (step.mount) {
    const r = await nativeFetch(`${args.base}/agents/${args.agent}/${args.name}/get-messages?session=${encodeURIComponent(args.chat)}`);
    const initial = await r.json();
    ctl.mount += 1;
    ctl.chat = null;
    const mount = ctl.mount;
    await TestRenderer.act(async () => {
      renderer = TestRenderer.create(h(ChatView, { mount, initial, resume: Boolean(step.mount.resume) }));
    });
    await waitFor(() => ctl.chat !== null, "mount", timeout);
  } else if (step.unmount) {
    await TestRenderer.act(async () => renderer.unmount());
    renderer = null;
    ctl.chat = null;
  } else if (step.send !== undefined) {
    ctl.chat.sendMessage({ text: step.send });
  } else if (step.waitText !== undefined) {
    await waitFor(() => text(lastAssistant(ctl.chat?.messages)) === step.waitText, `text ${step.waitText}`, timeout);
  } else if (step.waitTextStarts !== undefined) {
    await waitFor(() => text(lastAssistant(ctl.chat?.messages)).startsWith(step.waitTextStarts), "text start", timeout);
  } else if (step.waitStatus !== undefined) {
    await waitFor(() => ctl.chat?.status === step.waitStatus, `status ${step.waitStatus}`, timeout);
  } else if (step.waitPart) {
    await waitFor(
      () => (ctl.chat?.messages ?? []).some((m) => (m.parts ?? []).some((p) => isTool(p) &&
        toolName(p) === step.waitPart.toolName && p.state === step.waitPart.state)),
      `part ${JSON.stringify(step.waitPart)}`, timeout);
  } else if (step.answerTool) {
    ctl.toolAnswers.set(step.answerTool.toolName, step.answerTool);
  } else if (step.approve !== undefined) {
    const part = await waitFor(() => {
      for (const m of ctl.chat?.messages ?? []) {
        for (const p of m.parts ?? []) if (isTool(p) && p.state === "approval-requested") return p;
      }
      return null;
    }, "approval-requested", timeout);
    emit("approval", { id: part.approval.id, approved: step.approve });
    ctl.chat.addToolApprovalResponse({ id: part.approval.id, approved: step.approve });
  } else if (step.stop) {
    await ctl.chat.stop();
    const r = await nativeFetch(`${API}/${encodeURIComponent(args.chat)}/stop`, { method: "POST" });
    emit("stopped", await r.json());
  } else if (step.sleep !== undefined) {
    await sleep(step.sleep);
  } else if (step.dump) {
    emit("dump", { mount: ctl.mount, status: ctl.chat?.status ?? null, messages: snapshot(ctl.chat?.messages) });
  } else {
    throw new Error(`unknown step ${JSON.stringify(step)}`);
  }
}

emit("start", { node: process.version, api: API, lastOnly: args["last-only"] });
try {
  for (const [i, step] of steps.entries()) {
    emit("step", { i, step });
    await runStep(step);
    emit("step-done", { i });
  }
  if (ctl.chat) emit("dump", { mount: ctl.mount, status: ctl.chat.status, messages: snapshot(ctl.chat.messages) });
  clearInterval(keepAlive);
  finish(true);
} catch (e) {
  if (ctl.chat) emit("dump", { mount: ctl.mount, status: ctl.chat.status, messages: snapshot(ctl.chat.messages) });
  fatal("step", e);
}
