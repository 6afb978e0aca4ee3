import { useAgentChat } from "@cloudflare/ai-chat/react";
import { useAgent } from "agents/react";
import { useEffect, useMemo, useRef, useState } from "react";
import { getMessages, titleOf } from "./api.js";
import { authToken } from "./conversations.js";
import { Message } from "./Parts.jsx";

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
 * One conversation, a session of the instance: the agent's socket on that session
 * (useAgent, `?session=`), then the chat on it (useAgentChat). The page loads the
 * stored messages itself: the hook's own get-messages neither names the session
 * nor tells sessions of one instance apart in its cache.
 */
export function Chat({ agent, name, session, onTitle, onSettled }) {
  const [connection, setConnection] = useState("connecting");
  const token = authToken();
  // Browsers cannot set headers on a WebSocket: the token rides in the upgrade's query.
  const query = useMemo(() => {
    const q = { ...(session ? { session } : {}), ...(token ? { token } : {}) };
    return Object.keys(q).length ? q : undefined;
  }, [session, token]);
  const socket = useAgent({
    agent,
    name,
    query,
    onOpen: () => setConnection("open"),
    onClose: () => setConnection("closed")
  });
  const stored = useStoredMessages(agent, name, session);
  if (stored === null) return <p className="notice">Loading the conversation…</p>;
  return (
    <Conversation socket={socket} connection={connection} stored={stored} onTitle={onTitle} onSettled={onSettled} />
  );
}

/** The request id of the chat stream this socket is receiving, or null once it ended. */
function useLiveStream(socket) {
  const [live, setLive] = useState(null);
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
      setLive((current) => (frame.done ? (current === frame.id ? null : current) : frame.id));
    };
    socket.addEventListener("message", onMessage);
    return () => socket.removeEventListener("message", onMessage);
  }, [socket]);
  return live;
}

function statusText(chat, connection) {
  if (chat.connectionError) return `Disconnected: ${chat.connectionError.reason || chat.connectionError.code}`;
  if (connection !== "open") return connection === "closed" ? "Reconnecting…" : "Connecting…";
  if (chat.isRecovering) return "Recovering the answer…";
  if (chat.status === "submitted") return "Waiting for the answer…";
  if (chat.isStreaming) return "Answering…";
  if (chat.status === "error") return "Error";
  return "Ready";
}

function Conversation({ socket, connection, stored, onTitle, onSettled }) {
  const chat = useAgentChat({ agent: socket, onToolCall: answerToolCall, getInitialMessages: null, messages: stored });
  const { messages, status, error, sendMessage, stop, clearHistory, addToolApprovalResponse } = chat;
  const [draft, setDraft] = useState("");
  const busy = status === "submitted" || status === "streaming" || chat.isServerStreaming || chat.isRecovering;
  const input = useRef(null);
  const end = useRef(null);
  const live = useLiveStream(socket);

  useEffect(() => {
    end.current?.scrollIntoView({ block: "end" });
  }, [messages]);

  // The hook's stop() ends only a stream this tab asked for; one it only watches (another tab's)
  // is cancelled by its request id, which any tab may do.
  const stopAnswer = () => {
    if (status === "submitted" || status === "streaming" || !live) stop();
    else socket.send(JSON.stringify({ type: "cf_agent_chat_request_cancel", id: live }));
  };

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

  const onSubmit = (e) => {
    e.preventDefault();
    const text = draft.trim();
    if (!text || busy) return;
    setDraft("");
    sendMessage({ text });
    input.current?.focus();
  };
  const onKeyDown = (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.nativeEvent.isComposing) onSubmit(e);
  };
  const onApproval = (approvalId, approved) => addToolApprovalResponse({ id: approvalId, approved });

  return (
    <main className="chat" data-status={status} data-busy={busy ? "true" : "false"} data-connection={connection}>
      <ol className="messages" aria-label="Messages" aria-live="polite" aria-busy={busy}>
        {messages.length === 0 && <li className="empty">No messages yet. Say hi, or type “help”.</li>}
        {messages.map((m) => (
          <Message key={m.id} message={m} onApproval={onApproval} />
        ))}
        <li ref={end} aria-hidden="true" className="end" />
      </ol>
      {error && (
        <p className="notice error" role="alert">
          {String(error.message ?? error)}
        </p>
      )}
      <form className="composer" onSubmit={onSubmit}>
        <label htmlFor="message" className="visually-hidden">
          Message
        </label>
        <textarea
          id="message"
          ref={input}
          rows={2}
          value={draft}
          onChange={(e) => setDraft(e.target.value)}
          onKeyDown={onKeyDown}
          placeholder="Message (Enter to send, Shift+Enter for a new line)"
          autoFocus
        />
        <div className="actions">
          <p className="status" role="status" data-testid="status">
            {statusText(chat, connection)}
          </p>
          <button type="submit" disabled={busy || !draft.trim()}>
            Send
          </button>
          <button type="button" onClick={stopAnswer} disabled={!busy}>
            Stop
          </button>
          <button type="button" onClick={() => clearHistory()} disabled={busy || messages.length === 0}>
            Clear
          </button>
        </div>
      </form>
    </main>
  );
}
