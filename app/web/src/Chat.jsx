import { useAgentChat } from "@cloudflare/ai-chat/react";
import { useAgent } from "agents/react";
import { useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState } from "react";
import { EditForm, MessageActions, newMessageId } from "./Actions.jsx";
import { JumpToLatest, useFollow } from "./Follow.jsx";
import { continueAnswer, getForks, getMessages, switchBranch, titleOf } from "./api.js";
import { authToken } from "./conversations.js";
import { Message, TurnError, hasContent } from "./Parts.jsx";
import { outcomeOf, useServerMarks } from "./marks.js";
import { McpServers } from "./Views.jsx";

/**
 * Client tools: the page answers these calls itself (the model's tool call
 * settles the turn; the server continues it once the output arrives).
 */
const CLIENT_TOOLS = {
  getBrowserTime: () => {
    const now = new Date();
    return {
      time: new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" }).format(now),
      timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
      iso: now.toISOString()
    };
  }
};

/**
 * How the socket comes back after it lost the server: at once, then after 0.5 s, growing
 * by half each time up to 2.5 s (PartySocket's own 3 s growing to 10 s kept the page
 * away for about 11 s after a restart).
 */
const RECONNECT = { minReconnectionDelay: 500, maxReconnectionDelay: 2500, reconnectionDelayGrowFactor: 1.5 };
/** PartySocket's default: how long one try may take to open. */
const CONNECT_TIMEOUT_MS = 4000;

/** What the empty conversation offers to send (the demo's topics; any model answers them somehow). */
const SUGGESTIONS = [
  { text: "weather", hint: "a tool the server runs" },
  { text: "think", hint: "reasoning" },
  { text: "time", hint: "a tool your browser answers" },
  { text: "send money", hint: "a tool that asks for your approval" },
  { text: "note", hint: "a file the agent writes" },
  { text: "story", hint: "a slow stream to stop" }
];

/**
 * A touch screen (a phone): no keyboard hints it cannot use, and no focus on load (that would open
 * the on-screen keyboard over the conversation).
 */
const TOUCH = typeof window !== "undefined" && window.matchMedia?.("(pointer: coarse)").matches === true;

/** The hook's error when the socket closed under a stream: the connection banner says that better. */
const SOCKET_CLOSED = "WebSocket closed mid-stream";

async function answerToolCall({ toolCall, addToolOutput }) {
  const run = CLIENT_TOOLS[toolCall.toolName];
  if (!run) {
    addToolOutput({
      toolCallId: toolCall.toolCallId,
      state: "output-error",
      errorText: `This page cannot run the tool ${toolCall.toolName}.`
    });
    return;
  }
  try {
    addToolOutput({ toolCallId: toolCall.toolCallId, output: await run(toolCall.input) });
  } catch (e) {
    addToolOutput({ toolCallId: toolCall.toolCallId, state: "output-error", errorText: String(e?.message ?? e) });
  }
}

/** The session's stored messages, loaded once: null until they arrive. */
function useStoredMessages(agent, name, session) {
  const [messages, setMessages] = useState(null);
  useEffect(() => {
    let live = true;
    getMessages(agent, name, session)
      .catch((e) => {
        // The socket still sends the transcript once it opens.
        console.warn(`Cannot load the conversation: ${e.message ?? e}`);
        return [];
      })
      .then((found) => live && setMessages(found));
    return () => {
      live = false;
    };
  }, [agent, name, session]);
  return messages;
}

/**
 * The socket's state as the page shows it: "connecting" (never open yet), "open", or
 * "closed" (lost; PartySocket tries again, `attempts` times so far).
 */
function useConnection() {
  const [state, setState] = useState({ connection: "connecting", attempts: 0 });
  const onOpen = useCallback(() => setState({ connection: "open", attempts: 0 }), []);
  const onClose = useCallback(
    () => setState((s) => ({ connection: s.connection === "connecting" ? "connecting" : "closed", attempts: s.attempts + 1 })),
    []
  );
  return { ...state, onOpen, onClose };
}

/**
 * One conversation, a session of the instance: the agent's socket on that session
 * (useAgent, `?session=`), then the chat on it (useAgentChat). The page loads the
 * stored messages itself: the hook's own get-messages neither names the session
 * nor tells sessions of one instance apart in its cache.
 */
export function Chat({ agent, name, session, onTitle, onSettled, topics = true }) {
  const { connection, attempts, onOpen, onClose } = useConnection();
  const token = authToken();
  // Browsers cannot set headers on a WebSocket: the token rides in the upgrade's query.
  const query = useMemo(() => {
    const q = { ...(session ? { session } : {}), ...(token ? { token } : {}) };
    return Object.keys(q).length ? q : undefined;
  }, [session, token]);
  // "Retry now" cannot hurry PartySocket (its reconnect() waits out a delay already running):
  // it takes a new socket to the same address instead, which tries at once. An option in
  // PartySocket's list of those that make a new socket changes for that (by 1 ms).
  const [fresh, setFresh] = useState(0);
  const [mcp, setMcp] = useState(null); // the agent's MCP servers, as the socket last listed them
  const socket = useAgent({
    agent,
    name,
    query,
    onOpen,
    onClose,
    onMcpUpdate: setMcp,
    ...RECONNECT,
    connectionTimeout: CONNECT_TIMEOUT_MS + (fresh % 2)
  });
  const retryNow = useCallback(() => {
    if (socket.readyState !== WebSocket.OPEN) setFresh((n) => n + 1);
  }, [socket]);

  // Back on the network, or back to a tab the browser let sleep: try now rather than at the next delay.
  useEffect(() => {
    const again = () => {
      if (socket.readyState !== WebSocket.OPEN && socket.readyState !== WebSocket.CONNECTING) retryNow();
    };
    const onVisible = () => document.visibilityState === "visible" && again();
    window.addEventListener("online", again);
    document.addEventListener("visibilitychange", onVisible);
    return () => {
      window.removeEventListener("online", again);
      document.removeEventListener("visibilitychange", onVisible);
    };
  }, [socket, retryNow]);

  const stored = useStoredMessages(agent, name, session);
  if (stored === null) return <p className="notice">Loading the conversation…</p>;
  return (
    <Conversation
      agent={agent}
      name={name}
      session={session}
      socket={socket}
      connection={connection}
      attempts={attempts}
      onRetryNow={retryNow}
      stored={stored}
      mcp={mcp}
      onTitle={onTitle}
      onSettled={onSettled}
      topics={topics}
    />
  );
}

/**
 * What the socket says about each chat stream: the one running now (`live`, its request
 * id, or null), and the turns that failed with their error ({id, messageId, userId, text}):
 * any tab sees these, not only the one that asked. A reply that was stopped or failed says so
 * in its own metadata (marks.js), which a reload reads too; these cover a turn that failed
 * before its first word, which leaves no reply to say it.
 */
function useTurns(socket) {
  const [live, setLive] = useState(null);
  const [failures, setFailures] = useState([]);
  const replies = useRef(new Map()); // request id -> the assistant message id its stream started
  useEffect(() => {
    const onMessage = (event) => {
      if (typeof event.data !== "string" || !event.data.includes("cf_agent_use_chat_response")) return;
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      if (frame?.type !== "cf_agent_use_chat_response" || typeof frame.id !== "string") return;
      const rid = frame.id;
      if (!frame.done) {
        setLive(rid);
        if (typeof frame.body === "string" && frame.body.includes('"start"')) {
          try {
            const chunk = JSON.parse(frame.body);
            if (chunk?.type === "start" && typeof chunk.messageId === "string") replies.current.set(rid, chunk.messageId);
          } catch {
            // not a chunk: nothing to learn
          }
        }
        return;
      }
      setLive((current) => (current === rid ? null : current));
      const messageId = replies.current.get(rid) ?? null;
      if (frame.error || frame.outcome === "error") {
        const userId = Array.isArray(frame.messageIds) ? (frame.messageIds.at(-1) ?? null) : null;
        const text = (typeof frame.body === "string" && frame.body) || "The model could not answer.";
        setFailures((all) => [...all.filter((f) => f.id !== rid), { id: rid, messageId, userId, text }]);
      }
    };
    socket.addEventListener("message", onMessage);
    return () => socket.removeEventListener("message", onMessage);
  }, [socket]);
  const forget = useCallback((id) => setFailures((all) => all.filter((f) => f.id !== id)), []);
  return { live, failures, forget };
}

function statusText({ chat, connection, busy, awaitingApproval }) {
  if (chat.connectionError) return `Disconnected: ${chat.connectionError.reason || chat.connectionError.code}`;
  if (connection !== "open") return connection === "closed" ? "Offline: reconnecting…" : "Connecting…";
  if (chat.isRecovering) return "Recovering the answer…";
  if (chat.status === "submitted") return "Waiting for the answer…";
  if (busy) return "Answering…";
  if (awaitingApproval) return "Waiting for your approval";
  if (chat.status === "error") return "The last answer failed";
  return "Ready";
}

function ConnectionBanner({ connection, attempts, onRetry }) {
  // A first connection that keeps failing is as lost as one that closed.
  if (connection === "open" || (connection === "connecting" && attempts < 2)) return null;
  const offline = typeof navigator !== "undefined" && navigator.onLine === false;
  return (
    <div className="banner" role="alert" data-testid="connection-banner">
      <span className="banner-text">
        {offline ? "You are offline." : "Lost the connection to the server."} Reconnecting
        {attempts > 1 ? ` (tried ${attempts - 1} ${attempts === 2 ? "time" : "times"})` : ""}…
      </span>
      <button type="button" onClick={onRetry}>
        Retry now
      </button>
    </div>
  );
}

function Suggestions({ onPick, disabled, topics }) {
  // The topics are the demo script's: another model would answer them, but not show what they say.
  if (!topics) {
    return (
      <li className="empty">
        <p>No messages yet. Say hi.</p>
      </li>
    );
  }
  return (
    <li className="empty">
      <p>No messages yet. Say hi, or try one of these:</p>
      <ul className="suggestions" aria-label="Suggestions">
        {SUGGESTIONS.map((s) => (
          <li key={s.text}>
            <button
              type="button"
              className="suggestion"
              aria-label={s.text}
              title={`Send “${s.text}”: ${s.hint}`}
              onClick={() => onPick(s.text)}
              disabled={disabled}
            >
              <span className="suggestion-text">{s.text}</span>
              <span className="suggestion-hint"> · {s.hint}</span>
            </button>
          </li>
        ))}
      </ul>
    </li>
  );
}

/** The textarea's height follows its text, up to the cap style.css sets. */
function useAutoSize(ref, value) {
  useLayoutEffect(() => {
    const el = ref.current;
    if (!el) return;
    el.style.height = "auto";
    el.style.height = `${el.scrollHeight + (el.offsetHeight - el.clientHeight)}px`;
  }, [ref, value]);
}

/**
 * The versions the server holds of the messages shown ({id: [sibling ids, oldest first]}, only
 * those with more than one), asked again whenever the messages shown change and no answer runs.
 */
function useForks(agent, name, session, messages, busy) {
  const [forks, setForks] = useState({});
  const key = messages.map((m) => m.id).join(",");
  useEffect(() => {
    if (busy) return undefined;
    if (!key) {
      setForks({});
      return undefined;
    }
    let live = true;
    getForks(agent, name, session)
      .then((found) => live && setForks(found))
      .catch(() => {}); // no switcher until the next change: the messages themselves are what matters
    return () => {
      live = false;
    };
  }, [agent, name, session, key, busy]);
  return forks;
}

function Conversation({ agent, name, session, socket, connection, attempts, onRetryNow, stored, mcp, onTitle, onSettled, topics }) {
  const chat = useAgentChat({
    agent: socket,
    onToolCall: answerToolCall,
    getInitialMessages: null,
    messages: stored
  });
  const { messages, status, error, sendMessage, stop, addToolApprovalResponse } = chat;
  const [draft, setDraft] = useState("");
  const busy = status === "submitted" || status === "streaming" || chat.isServerStreaming || chat.isRecovering;
  const input = useRef(null);
  const list = useRef(null);
  const end = useRef(null);
  const turns = useTurns(socket);
  const marks = useServerMarks(socket, stored);
  const outcome = (m) => outcomeOf(m, marks);
  const { live, forget } = turns;
  const forks = useForks(agent, name, session, messages, busy);
  const [editing, setEditing] = useState(null); // the id of the user message being edited
  const [actionError, setActionError] = useState(null);
  const initialIds = useRef(new Set(stored.map((m) => m.id)));
  // Messages typed while the socket was down go once it opens: until then they are marked.
  const [offlineSince, setOfflineSince] = useState(null); // ids of the messages before the first one
  useAutoSize(input, draft);

  const follow = useFollow(list, end, [messages, turns.failures]);

  // Back online: the socket's own error ("closed mid-stream") is over, and queued messages went.
  const wasOpen = useRef(connection === "open");
  useEffect(() => {
    if (connection === "open" && !wasOpen.current) {
      if (chat.error?.message === SOCKET_CLOSED) chat.clearError();
      setOfflineSince(null);
    }
    wasOpen.current = connection === "open";
  }, [connection, chat]);

  // The hook's stop() ends only a stream this tab asked for; one it only watches (another tab's)
  // is cancelled by its request id, which any tab may do.
  const stopAnswer = useCallback(() => {
    if (status === "submitted" || status === "streaming" || !live) stop();
    else socket.send(JSON.stringify({ type: "cf_agent_chat_request_cancel", id: live }));
    input.current?.focus();
  }, [status, live, stop, socket]);

  // Esc stops the answer, wherever the focus is (a field that uses Esc itself prevents this).
  useEffect(() => {
    if (!busy) return;
    const onKey = (e) => {
      if (e.key !== "Escape" || e.defaultPrevented) return;
      e.preventDefault();
      stopAnswer();
    };
    document.addEventListener("keydown", onKey);
    return () => document.removeEventListener("keydown", onKey);
  }, [busy, stopAnswer]);

  // The list beside the chat names this conversation by its first words, and looks
  // at the server again once a turn is over (its order and counts changed).
  const title = titleOf(messages);
  useEffect(() => {
    onTitle?.(title);
  }, [title, onTitle]);
  const wasBusy = useRef(busy);
  useEffect(() => {
    if (wasBusy.current && !busy) onSettled?.();
    wasBusy.current = busy;
  }, [busy, onSettled]);

  const send = (text) => {
    if (!text || busy) return;
    if (connection !== "open" && offlineSince === null) setOfflineSince(new Set(messages.map((m) => m.id)));
    sendMessage({ text });
    input.current?.focus();
  };
  const onSubmit = (e) => {
    e.preventDefault();
    const text = draft.trim();
    if (!text || busy) return;
    setDraft("");
    send(text);
  };
  const onKeyDown = (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.nativeEvent.isComposing) onSubmit(e);
  };
  const onApproval = (approvalId, approved) => {
    addToolApprovalResponse({ id: approvalId, approved });
    input.current?.focus();
  };

  // Regenerate, Edit, Continue and the branch switcher: each keeps what was there (the server
  // makes a new branch, or goes on in the same message); none runs while an answer does.
  const canAct = !busy && connection === "open";
  const regenerate = () => {
    setActionError(null);
    chat.clearError();
    chat.regenerate();
    input.current?.focus();
  };
  const sendEdit = (message, text) => {
    const at = messages.findIndex((m) => m.id === message.id);
    setEditing(null);
    if (at < 0 || busy) return;
    setActionError(null);
    chat.clearError();
    // The edited text is a new message (a new id) after the ones before the original: sent as a
    // regeneration, it starts a new branch there, and the original stays one switch away.
    chat.setMessages([...messages.slice(0, at), { id: newMessageId(), role: "user", parts: [{ type: "text", text }] }]);
    chat.regenerate();
    input.current?.focus();
  };
  const goOn = async () => {
    setActionError(null);
    try {
      await continueAnswer(agent, name, session); // the server takes the Stopped mark off, for every tab
    } catch (e) {
      setActionError(`Cannot continue: ${e.message ?? e}`);
    }
  };
  const switchTo = async (id) => {
    setActionError(null);
    try {
      await switchBranch(agent, name, session, id); // every tab, this one too, gets the transcript
    } catch (e) {
      setActionError(`Cannot show that version: ${e.message ?? e}`);
    }
  };

  // The failed turns: each shows inside its reply, or as a reply of its own when it failed
  // before its first word. The hook's own error (this tab's request) shows the same way
  // when the socket did not already tell.
  // A reply's own failure (its metadata) first; the socket's word for it is the same turn.
  const failures = messages
    .filter((m) => outcome(m).error !== null)
    .map((m) => ({ id: `reply-${m.id}`, messageId: m.id, userId: null, text: outcome(m).error }));
  for (const f of turns.failures) if (!failures.some((g) => g.messageId === f.messageId)) failures.push(f);
  const hookError = error && error.message !== SOCKET_CLOSED ? String(error.message ?? error) : null;
  if (hookError && !failures.some((f) => f.text === hookError)) {
    failures.push({ id: "hook-error", messageId: null, userId: null, text: hookError });
  }
  // Only the failure that ended the conversation can be retried (regenerate answers the last message).
  const lastShown = messages.findLast((m) => m.role !== "assistant" || hasContent(m));
  const lastFailure = failures.findLast(
    (f) => (f.id === "hook-error" && status === "error") || (lastShown && [f.messageId, f.userId].includes(lastShown.id))
  );
  const retry = (failure) => () => {
    // The socket's word for the same reply goes too: the reply leaves the path with the retry.
    for (const f of turns.failures) if (f.id === failure.id || (f.messageId && f.messageId === failure.messageId)) forget(f.id);
    chat.clearError();
    chat.regenerate();
    input.current?.focus();
  };
  const errorOf = (failure) => ({
    text: failure.text,
    onRetry: failure === lastFailure && !busy && connection === "open" ? retry(failure) : null
  });

  const lastId = messages.at(-1)?.id;
  const answering = busy && messages.at(-1)?.role === "assistant";
  const rows = [];
  const placed = new Set();
  const failureRow = (f) => (
    <li key={`failed-${f.id}`} className="message assistant" data-role="assistant" data-id={`failed-${f.id}`} data-failed="true">
      <h2 className="role">Assistant</h2>
      <TurnError {...errorOf(f)} />
    </li>
  );
  for (const m of messages) {
    const streaming = answering && m.id === lastId;
    const failure = failures.find((f) => f.messageId === m.id);
    if (m.role === "assistant" && !streaming && !hasContent(m)) continue; // a reply that never said a word
    if (failure) placed.add(failure.id);
    if (editing === m.id) {
      rows.push(<EditForm key={m.id} message={m} onSend={(text) => sendEdit(m, text)} onCancel={() => setEditing(null)} />);
      continue;
    }
    const last = m.id === lastId;
    const actions =
      streaming || (offlineSince !== null && !offlineSince.has(m.id)) ? null : (
        <MessageActions
          message={m}
          siblings={forks[m.id]}
          busy={!canAct}
          onSwitch={canAct ? switchTo : null}
          onEdit={m.role === "user" && canAct ? () => setEditing(m.id) : null}
          onRegenerate={m.role === "assistant" && last && canAct && !failure ? regenerate : null}
          onContinue={m.role === "assistant" && last && canAct && outcome(m).stopped ? goOn : null}
        />
      );
    rows.push(
      <Message
        key={m.id}
        message={m}
        onApproval={onApproval}
        streaming={streaming}
        stopped={outcome(m).stopped}
        reasoningMs={outcome(m).reasoningMs}
        error={failure ? errorOf(failure) : null}
        pending={offlineSince !== null && m.role === "user" && !offlineSince.has(m.id)}
        live={!initialIds.current.has(m.id)}
        superseded={m.id !== lastId}
        actions={actions}
      />
    );
    for (const f of failures) {
      if (!placed.has(f.id) && f.userId === m.id && !messages.some((x) => x.id === f.messageId && hasContent(x))) {
        placed.add(f.id);
        rows.push(failureRow(f));
      }
    }
  }
  for (const f of failures) if (!placed.has(f.id) && !messages.some((x) => x.id === f.messageId && hasContent(x))) rows.push(failureRow(f));

  const lastMessage = messages.at(-1);
  const awaitingApproval =
    lastMessage?.role === "assistant" && lastMessage.parts.some((p) => p.state === "approval-requested");
  const waiting = status === "submitted" && !answering;

  return (
    <main className="chat" data-status={status} data-busy={busy ? "true" : "false"} data-connection={connection}>
      <ConnectionBanner connection={connection} attempts={attempts} onRetry={onRetryNow} />
      <McpServers mcp={mcp} />
      {actionError && (
        <p className="notice error action-error" role="alert">
          {actionError}
        </p>
      )}
      <ol className="messages" ref={list} aria-label="Messages">
        {messages.length === 0 && failures.length === 0 && <Suggestions onPick={send} disabled={busy} topics={topics} />}
        {rows}
        {waiting && (
          <li className="waiting" aria-hidden="true">
            <span className="typing" />
          </li>
        )}
        <li ref={end} aria-hidden="true" className="end" />
      </ol>
      {follow.away && <JumpToLatest onJump={follow.jump} streaming={busy} />}
      <form className="composer" onSubmit={onSubmit}>
        <label htmlFor="message" className="visually-hidden">
          Message
        </label>
        <textarea
          id="message"
          ref={input}
          rows={1}
          value={draft}
          onChange={(e) => setDraft(e.target.value)}
          onKeyDown={onKeyDown}
          placeholder={
            TOUCH ? "Message" : busy ? "Esc stops the answer" : "Message (Enter to send, Shift+Enter for a new line)"
          }
          autoFocus={!TOUCH}
        />
        <div className="actions">
          <p className="status" role="status" data-testid="status">
            {statusText({ chat, connection, busy, awaitingApproval })}
          </p>
          {busy ? (
            <button type="button" className="stop" onClick={stopAnswer} title={TOUCH ? "Stop the answer" : "Stop the answer (Esc)"}>
              Stop
            </button>
          ) : (
            <button type="submit" className="send" disabled={!draft.trim()}>
              Send
            </button>
          )}
        </div>
      </form>
    </main>
  );
}
