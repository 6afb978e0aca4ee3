import { useCallback, useEffect, useRef, useState } from "react";
import { createSession, deleteSession, getMessages, listSessions, titleOf } from "./api.js";
import { Chat } from "./Chat.jsx";
import {
  DEFAULT_NAME,
  authToken,
  earlierNames,
  hashOf,
  isValidName,
  isValidSession,
  readHash
} from "./conversations.js";

const UNTITLED = "New chat";

function useAgentNames() {
  const [state, setState] = useState({ agents: null, error: null });
  useEffect(() => {
    let live = true;
    const token = authToken();
    const headers = { accept: "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) };
    fetch("/api/agents", { headers })
      .then(async (res) => {
        if (!res.ok) throw new Error(`GET /api/agents answered ${res.status}`);
        const agents = await res.json();
        if (!Array.isArray(agents)) throw new Error("GET /api/agents did not answer a list");
        if (live) setState({ agents, error: null });
      })
      .catch((e) => live && setState({ agents: null, error: String(e.message ?? e) }));
    return () => {
      live = false;
    };
  }, []);
  return state;
}

/**
 * The open conversation, {agent, name, session}, from the URL hash; what the hash
 * leaves out or gets wrong becomes the first agent, the default instance, the root session.
 */
function useConversation(agents) {
  const [current, setCurrent] = useState(() => readHash());
  useEffect(() => {
    const onHash = () => setCurrent(readHash());
    window.addEventListener("hashchange", onHash);
    return () => window.removeEventListener("hashchange", onHash);
  }, []);
  const valid =
    current && agents?.includes(current.agent) && isValidName(current.name) && isValidSession(current.session);
  useEffect(() => {
    if (!agents || agents.length === 0 || valid) return;
    const served = current && agents.includes(current.agent);
    const next = {
      agent: served ? current.agent : agents[0],
      name: served && isValidName(current.name) ? current.name : DEFAULT_NAME,
      session: served && isValidName(current.name) && isValidSession(current.session) ? current.session : ""
    };
    window.history.replaceState(null, "", hashOf(next));
    setCurrent(next);
  }, [agents, current, valid]);
  return valid ? current : null;
}

function open(conversation, { replace = false } = {}) {
  if (replace) window.location.replace(hashOf(conversation));
  else window.location.hash = hashOf(conversation);
}

/** Titles already worked out, by agent, instance and session: a transcript is loaded once for its title. */
const TITLES = new Map();
const titleKey = (agent, name, session) => JSON.stringify([agent, name, session]);

/**
 * The instance's sessions as the server lists them, with a title for each; listed
 * again on `refresh()` and whenever the window gets the focus back.
 */
function useSessions(agent, name, openSession) {
  const [state, setState] = useState({ sessions: null, error: null });
  const [, setTitlesSeen] = useState(0);
  const asked = useRef(0);
  const refresh = useCallback(async () => {
    if (!agent) return;
    const n = ++asked.current;
    try {
      const sessions = await listSessions(agent, name);
      if (n === asked.current) setState({ sessions, error: null });
    } catch (e) {
      if (n === asked.current) setState((s) => ({ sessions: s.sessions, error: String(e.message ?? e) }));
    }
  }, [agent, name]);

  useEffect(() => {
    setState({ sessions: null, error: null });
    refresh();
    window.addEventListener("focus", refresh);
    return () => window.removeEventListener("focus", refresh);
  }, [refresh]);

  // Titles: the open conversation reports its own (setTitle); the others load their
  // transcript once, one at a time, and only when they have messages.
  useEffect(() => {
    if (!state.sessions) return;
    let live = true;
    (async () => {
      for (const s of state.sessions) {
        const key = titleKey(agent, name, s.id);
        if (s.message_count === 0) TITLES.delete(key);
        if (!live || s.id === openSession || s.message_count === 0 || TITLES.has(key)) continue;
        try {
          TITLES.set(key, titleOf(await getMessages(agent, name, s.id)));
        } catch {
          continue; // untitled for now; tried again at the next listing
        }
        if (live) setTitlesSeen((n) => n + 1);
      }
    })();
    return () => {
      live = false;
    };
  }, [state.sessions, agent, name, openSession]);

  const setTitle = useCallback(
    (session, title) => {
      const key = titleKey(agent, name, session);
      if (TITLES.get(key) === title) return;
      TITLES.set(key, title);
      setTitlesSeen((n) => n + 1);
    },
    [agent, name]
  );
  const titleOfSession = (session) => TITLES.get(titleKey(agent, name, session)) || UNTITLED;
  return { ...state, refresh, setTitle, titleOf: titleOfSession };
}

/** What the list shows: newest first, the open one always, the root only once it was used. */
function listed(sessions, openSession, titleOfSession) {
  let rows = sessions.filter((s) => s.id !== "" || s.message_count > 0 || s.id === openSession);
  if (!rows.some((s) => s.id === openSession)) {
    rows = [{ id: openSession, created_at: Date.now(), updated_at: Date.now(), message_count: 0 }, ...rows];
  }
  return rows
    .map((s) => ({ ...s, title: titleOfSession(s.id) }))
    .sort((a, b) => b.updated_at - a.updated_at || b.created_at - a.created_at);
}

function SessionRow({ session, current, onDelete }) {
  const [confirming, setConfirming] = useState(false);
  const [deleting, setDeleting] = useState(false);
  const here = session.id === current.session;
  const remove = async () => {
    setDeleting(true);
    try {
      await onDelete(session.id);
    } finally {
      setDeleting(false);
      setConfirming(false);
    }
  };
  return (
    <li className="session" data-session={session.id}>
      <div className="session-row">
        <a href={hashOf({ ...current, session: session.id })} aria-current={here ? "page" : undefined}>
          {session.title}
        </a>
        {session.id !== "" && !confirming && (
          <button
            type="button"
            className="delete"
            aria-label={`Delete conversation: ${session.title}`}
            title="Delete this conversation"
            onClick={() => setConfirming(true)}
          >
            ×
          </button>
        )}
      </div>
      {confirming && (
        <div className="confirm" role="group" aria-label={`Delete conversation: ${session.title}?`}>
          <span>Delete it for good?</span>
          <button type="button" className="danger" onClick={remove} disabled={deleting}>
            Delete
          </button>
          <button type="button" onClick={() => setConfirming(false)} disabled={deleting} autoFocus>
            Cancel
          </button>
        </div>
      )}
    </li>
  );
}

function Sidebar({ agents, current, list }) {
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState(null);
  const { agent, name } = current;
  const onNew = async () => {
    setBusy(true);
    setProblem(null);
    try {
      const made = await createSession(agent, name);
      open({ agent, name, session: made.id });
      await list.refresh();
    } catch (e) {
      setProblem(`Cannot start a new chat: ${e.message ?? e}`);
    } finally {
      setBusy(false);
    }
  };
  const onDelete = async (session) => {
    setProblem(null);
    try {
      await deleteSession(agent, name, session);
      if (session === current.session) open({ agent, name }, { replace: true });
    } catch (e) {
      setProblem(`Cannot delete the conversation: ${e.message ?? e}`);
    }
    await list.refresh();
  };
  const error = problem ?? (list.error && `Cannot list the conversations: ${list.error}`);
  const earlier = earlierNames(agent).filter((n) => n !== name);
  return (
    <nav className="sidebar" aria-label="Conversations">
      <label className="field">
        <span>Agent</span>
        <select value={agent} onChange={(e) => open({ agent: e.target.value, name })}>
          {agents.map((a) => (
            <option key={a} value={a}>
              {a}
            </option>
          ))}
        </select>
      </label>
      <button type="button" className="new-chat" onClick={onNew} disabled={busy}>
        New chat
      </button>
      <h2>Conversations</h2>
      {error && (
        <p className="sidebar-error" role="alert">
          {error}
        </p>
      )}
      {list.sessions === null ? (
        <p className="hint">Loading…</p>
      ) : (
        <ul className="sessions">
          {listed(list.sessions, current.session, list.titleOf).map((s) => (
            <SessionRow key={s.id} session={s} current={current} onDelete={onDelete} />
          ))}
        </ul>
      )}
      {earlier.length > 0 && (
        <details className="earlier">
          <summary>Earlier, in this browser</summary>
          <ul className="sessions">
            {earlier.map((n) => (
              <li key={n} className="session">
                <a href={hashOf({ agent, name: n })}>{n}</a>
              </li>
            ))}
          </ul>
        </details>
      )}
    </nav>
  );
}

export function App() {
  const { agents, error } = useAgentNames();
  const current = useConversation(agents);
  const list = useSessions(current?.agent, current?.name, current?.session);
  const title = current ? list.titleOf(current.session) : null;
  useEffect(() => {
    document.title = current ? `${title} · ${current.agent} · think-server` : "think-server chat";
  }, [current, title]);
  const session = current?.session;
  const onTitle = useCallback((t) => list.setTitle(session, t), [list.setTitle, session]);
  let body;
  if (error) {
    body = (
      <p className="notice error" role="alert">
        Cannot list the agents: {error}
      </p>
    );
  } else if (agents && agents.length === 0) {
    body = <p className="notice">This server has no agents.</p>;
  } else if (!agents || !current) {
    body = <p className="notice">Loading…</p>;
  } else {
    // Another conversation is a new socket and a new chat: remount rather than re-point the hooks.
    const key = JSON.stringify([current.agent, current.name, current.session]);
    body = (
      <div className="layout">
        <Sidebar agents={agents} current={current} list={list} />
        <Chat
          key={key}
          agent={current.agent}
          name={current.name}
          session={current.session}
          onTitle={onTitle}
          onSettled={list.refresh}
        />
      </div>
    );
  }
  return (
    <>
      <header className="top">
        <h1>think-server</h1>
        {current && (
          <p className="where">
            <span className="agent-name">{current.agent}</span> / <span data-testid="instance">{current.name}</span>{" "}
            / <span data-testid="conversation">{title}</span>
          </p>
        )}
      </header>
      {body}
    </>
  );
}
