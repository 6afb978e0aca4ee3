import { Suspense, lazy, useCallback, useEffect, useRef, useState } from "react";
import { AWAY, deleteSession, getMessages, listSessions, newSessionId, renameSession, titleOf } from "./api.js";
import { FileOpener, Files, useFiles } from "./Files.jsx";
import { Header, offersTopics, readAgents } from "./Header.jsx";
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

// The chat and what it runs on (the AI SDK, the agents client, zod) are most of the page's
// JavaScript: a chunk of their own, asked for as this module starts, so the header and the
// conversation list show while it arrives.
const chatModule = import("./Chat.jsx");
const Chat = lazy(() => chatModule.then((m) => ({ default: m.Chat })));

function ChatLoading() {
  return (
    <main className="chat" data-connection="loading" aria-busy="true">
      <p className="notice">Loading…</p>
    </main>
  );
}

function useAgentNames() {
  const [state, setState] = useState({ agents: null, models: null, error: null });
  useEffect(() => {
    let live = true;
    const token = authToken();
    const headers = { accept: "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) };
    fetch("/api/agents", { headers })
      .then(async (res) => {
        if (!res.ok) throw new Error(`GET /api/agents answered ${res.status}`);
        const { agents, models } = readAgents(await res.json());
        if (live) setState({ agents, models, error: null });
      })
      .catch((e) => live && setState({ agents: null, models: null, error: String(e.message ?? e) }));
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

/** How often the list is asked again while the page shows: a conversation another tab started appears. */
const LIST_EVERY_MS = 4000;

/**
 * The instance's sessions as the server lists them, with a title for each; listed again on
 * `refresh()`, whenever the window gets the focus back, and every few seconds while it shows.
 * While the server is away the last list stays, marked `away`.
 */
function useSessions(agent, name, openSession) {
  const [state, setState] = useState({ sessions: null, error: null, away: false });
  const [, setTitlesSeen] = useState(0);
  const asked = useRef(0);
  const refresh = useCallback(async () => {
    if (!agent) return;
    const n = ++asked.current;
    try {
      const sessions = await listSessions(agent, name);
      if (n === asked.current) setState({ sessions, error: null, away: false });
    } catch (e) {
      if (n === asked.current) {
        setState((s) => ({ sessions: s.sessions, error: e.offline ? null : String(e.message ?? e), away: !!e.offline }));
      }
    }
  }, [agent, name]);

  useEffect(() => {
    setState({ sessions: null, error: null, away: false });
    refresh();
    window.addEventListener("focus", refresh);
    const timer = setInterval(() => document.visibilityState === "visible" && refresh(), LIST_EVERY_MS);
    return () => {
      window.removeEventListener("focus", refresh);
      clearInterval(timer);
    };
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
        if (!live || s.id === openSession || s.message_count === 0 || s.title || TITLES.has(key)) continue;
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

/** When a row the server does not list yet was first shown: its place in the list stays put. */
const FIRST_SEEN = new Map();

/** What the list shows: the newest first, the open one always, the root only once it was used. */
function listed(sessions, openSession, titleOfSession) {
  let rows = sessions.filter((s) => s.id !== "" || s.message_count > 0 || s.id === openSession);
  if (!rows.some((s) => s.id === openSession)) {
    if (!FIRST_SEEN.has(openSession)) FIRST_SEEN.set(openSession, Date.now());
    const seen = FIRST_SEEN.get(openSession);
    rows = [{ id: openSession, created_at: seen, updated_at: seen, active_at: seen, message_count: 0, title: null }, ...rows];
  }
  // By last activity, as a chat app lists them (the server's active_at: its last message written; a
  // rename does not move it); the open conversation, while empty, on top: it is the one being started.
  const activity = (s) => (s.id === openSession && s.message_count === 0 ? Infinity : (s.active_at ?? s.updated_at));
  return rows
    .map((s) => ({ ...s, named: s.title, title: s.title || titleOfSession(s.id) }))
    .sort((a, b) => activity(b) - activity(a) || b.created_at - a.created_at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

const RELATIVE = new Intl.RelativeTimeFormat(undefined, { numeric: "auto", style: "short" });

/** "now", "5 min. ago", "yesterday", or the date: when a conversation last changed. */
function when(ms, now = Date.now()) {
  if (!ms) return "";
  const seconds = Math.round((ms - now) / 1000);
  if (Math.abs(seconds) < 60) return "now";
  const minutes = Math.round(seconds / 60);
  if (Math.abs(minutes) < 60) return RELATIVE.format(minutes, "minute");
  const hours = Math.round(minutes / 60);
  if (Math.abs(hours) < 24) return RELATIVE.format(hours, "hour");
  const days = Math.round(hours / 24);
  if (Math.abs(days) < 7) return RELATIVE.format(days, "day");
  return new Date(ms).toLocaleDateString(undefined, { month: "short", day: "numeric" });
}

/** Re-renders every minute, so "5 min. ago" keeps true. */
function useMinute() {
  const [, setTick] = useState(0);
  useEffect(() => {
    const timer = setInterval(() => setTick((n) => n + 1), 60_000);
    return () => clearInterval(timer);
  }, []);
}

const MAX_TITLE = 200;

function RenameForm({ session, onRename, onDone }) {
  const [value, setValue] = useState(session.title === UNTITLED ? "" : session.title);
  const [saving, setSaving] = useState(false);
  const [problem, setProblem] = useState(null);
  const save = async (e) => {
    e.preventDefault();
    setSaving(true);
    setProblem(null);
    try {
      await onRename(session.id, value.trim() || null);
      onDone();
    } catch (err) {
      setProblem(String(err.message ?? err));
      setSaving(false);
    }
  };
  return (
    <form
      className="rename"
      onSubmit={save}
      onKeyDown={(e) => {
        if (e.key === "Escape") {
          e.preventDefault();
          onDone();
        }
      }}
    >
      <label>
        <span className="visually-hidden">New title for {session.title}</span>
        <input
          value={value}
          maxLength={MAX_TITLE}
          onChange={(e) => setValue(e.target.value)}
          autoFocus
          onFocus={(e) => e.target.select()}
          placeholder="A title (empty: its first words)"
        />
      </label>
      <button type="submit" disabled={saving}>
        Save
      </button>
      <button type="button" onClick={onDone} disabled={saving}>
        Cancel
      </button>
      {problem && (
        <p className="sidebar-error" role="alert">
          {problem}
        </p>
      )}
    </form>
  );
}

/** A conversation in the list; one with something in it (the root's too) can be renamed and deleted. */
function SessionRow({ session, current, onDelete, onRename, onOpen }) {
  const [mode, setMode] = useState(null); // null, "confirm" or "rename"
  const [deleting, setDeleting] = useState(false);
  const here = session.id === current.session;
  const menu = useRef(null);
  const done = () => {
    setMode(null);
    // Back where the person was: the row's own buttons.
    setTimeout(() => menu.current?.focus(), 0);
  };
  const remove = async () => {
    setDeleting(true);
    try {
      await onDelete(session.id);
    } finally {
      setDeleting(false);
      setMode(null);
    }
  };
  return (
    <li className="session" data-session={session.id} data-current={here ? "true" : undefined}>
      {mode === "rename" ? (
        <RenameForm session={session} onRename={onRename} onDone={done} />
      ) : (
        <div className="session-row">
          <a href={hashOf({ ...current, session: session.id })} aria-current={here ? "page" : undefined} onClick={onOpen}>
            {session.title}
          </a>
          <time className="session-time" dateTime={new Date(session.updated_at || Date.now()).toISOString()}>
            {when(session.updated_at)}
          </time>
          {mode === null && (session.message_count > 0 || session.named) && (
            <span className="session-actions">
              <button
                type="button"
                className="icon rename-button"
                ref={menu}
                aria-label={`Rename conversation: ${session.title}`}
                title="Rename this conversation"
                onClick={() => setMode("rename")}
              >
                ✎
              </button>
              <button
                type="button"
                className="icon delete"
                aria-label={`Delete conversation: ${session.title}`}
                title="Delete this conversation"
                onClick={() => setMode("confirm")}
              >
                ×
              </button>
            </span>
          )}
        </div>
      )}
      {mode === "confirm" && (
        <div className="confirm" role="group" aria-label={`Delete conversation: ${session.title}?`}>
          <span>Delete it for good?</span>
          <button type="button" className="danger" onClick={remove} disabled={deleting}>
            Delete
          </button>
          <button type="button" onClick={done} disabled={deleting} autoFocus>
            Cancel
          </button>
        </div>
      )}
    </li>
  );
}

function Sidebar({ agents, current, list, open: drawerOpen, onClose }) {
  const [problem, setProblem] = useState(null);
  const { agent, name } = current;
  useMinute();
  // Nothing is made on the server yet: the conversation exists once its first message is sent,
  // so a New chat left empty leaves no row behind.
  const onNew = () => {
    setProblem(null);
    open({ agent, name, session: newSessionId() });
    onClose();
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
  const onRename = async (session, title) => {
    await renameSession(agent, name, session, title);
    await list.refresh();
  };
  const error = problem ?? (list.error && `Cannot list the conversations: ${list.error}`);
  const away = list.away && !problem;
  const earlier = earlierNames(agent).filter((n) => n !== name);
  return (
    <nav
      id="sidebar"
      className="sidebar"
      aria-label="Conversations"
      data-open={drawerOpen ? "true" : "false"}
      onKeyDown={(e) => {
        if (e.key === "Escape" && drawerOpen && !e.defaultPrevented) {
          e.preventDefault();
          onClose({ focusToggle: true });
        }
      }}
    >
      <button type="button" className="new-chat" onClick={onNew}>
        New chat
      </button>
      {agents.length > 1 && (
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
      )}
      <h2>Conversations</h2>
      {away && (
        <p className="banner calm" aria-live="polite" data-testid="sidebar-banner">
          <span className="banner-text">{AWAY}</span>
        </p>
      )}
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
            <SessionRow
              key={s.id}
              session={s}
              current={current}
              onDelete={onDelete}
              onRename={onRename}
              onOpen={() => onClose()}
            />
          ))}
        </ul>
      )}
      <p className="instance-line">
        Instance <span data-testid="instance">{name}</span>
      </p>
      {earlier.length > 0 && (
        <details className="earlier">
          <summary>Earlier, in this browser</summary>
          <ul className="sessions">
            {earlier.map((n) => (
              <li key={n} className="session">
                <a href={hashOf({ agent, name: n })} onClick={() => onClose()}>
                  {n}
                </a>
              </li>
            ))}
          </ul>
        </details>
      )}
    </nav>
  );
}

/** The sidebar as a drawer on a narrow screen: open, closed, and the focus that goes with it. */
function useDrawer() {
  const [isOpen, setOpen] = useState(false);
  const toggle = useRef(null);
  const close = useCallback(({ focusToggle = false } = {}) => {
    setOpen(false);
    if (focusToggle) toggle.current?.focus();
  }, []);
  useEffect(() => {
    if (!isOpen) return;
    // Into the drawer: its first control.
    const first = document.querySelector("#sidebar button, #sidebar a");
    first?.focus();
  }, [isOpen]);
  return { isOpen, open: () => setOpen(true), close, toggle };
}

export function App() {
  const { agents, models, error } = useAgentNames();
  const current = useConversation(agents);
  const list = useSessions(current?.agent, current?.name, current?.session);
  const drawer = useDrawer();
  const session = current?.session;
  // A title a person gave the conversation first, else its first words.
  const named = list.sessions?.find((s) => s.id === session)?.title;
  const title = current ? named || list.titleOf(session) : null;
  useEffect(() => {
    document.title = current ? `${title} · ${current.agent} · think-server` : "think-server chat";
  }, [current, title]);
  const onTitle = useCallback((t) => list.setTitle(session, t), [list.setTitle, session]);
  // The workspace's files change with the answers: read again after each one.
  const [answers, setAnswers] = useState(0);
  const files = useFiles(current?.agent, current?.name, answers);
  // At phone width the Files panel is a sheet over the chat: opened from the header or by a file
  // tool's Open button (on a wide screen the panel is always beside the chat and this changes nothing).
  const [sheet, setSheet] = useState(false);
  const filesToggle = useRef(null);
  const openFile = useCallback(
    (path) => {
      files.open(path);
      setSheet(true);
    },
    [files.open]
  );
  const closeSheet = useCallback(() => {
    setSheet(false);
    filesToggle.current?.focus();
  }, []);
  const hasFiles = (files.files?.length ?? 0) > 0;
  const onSettled = useCallback(() => {
    list.refresh();
    setAnswers((n) => n + 1);
  }, [list.refresh]);
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
      <div className="layout" data-drawer={drawer.isOpen ? "open" : "closed"}>
        <Sidebar agents={agents} current={current} list={list} open={drawer.isOpen} onClose={drawer.close} />
        {drawer.isOpen && <div className="scrim" aria-hidden="true" onClick={() => drawer.close()} />}
        {sheet && hasFiles && <div className="scrim sheet-scrim" aria-hidden="true" onClick={closeSheet} />}
        <FileOpener.Provider value={openFile}>
          <Suspense fallback={<ChatLoading />}>
            <Chat
              key={key}
              agent={current.agent}
              name={current.name}
              session={current.session}
              onTitle={onTitle}
              onSettled={onSettled}
              topics={offersTopics(models, current.agent)}
            />
          </Suspense>
        </FileOpener.Provider>
        <Files agent={current.agent} name={current.name} state={files} version={answers} sheet={sheet} onCloseSheet={closeSheet} />
      </div>
    );
  }
  return (
    <>
      <Header
        ref={filesToggle}
        current={current}
        agents={agents ?? []}
        models={models}
        title={title}
        drawer={drawer}
        hasFiles={hasFiles}
        sheet={sheet}
        onFiles={() => (sheet ? closeSheet() : setSheet(true))}
      />
      {body}
    </>
  );
}
