// The server's HTTP API for one agent instance: its sessions and their transcripts.
// Plain HTTP carries the token in the Authorization header (the server takes
// ?token= on the socket only).
import { authToken } from "./conversations.js";

/** An HTTP answer the page did not want: its status and the server's error text. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }

  /** No answer at all: the server is away (or the network), not a refusal. */
  get offline() {
    return this.status === 0;
  }
}

/** What the page says while the server is away, everywhere (the chat's banner says the same). */
export const AWAY = "Lost the connection to the server. Reconnecting…";

function base(agent, name) {
  return `/agents/${encodeURIComponent(agent)}/${encodeURIComponent(name)}`;
}

async function call(path, init = {}) {
  const token = authToken();
  const headers = { accept: "application/json", ...(init.body ? { "content-type": "application/json" } : {}) };
  if (token) headers.authorization = `Bearer ${token}`;
  let res;
  try {
    res = await fetch(path, { ...init, headers });
  } catch {
    throw new ApiError(0, AWAY); // the browser's own words ("Failed to fetch") say nothing to a person
  }
  if (!res.ok) {
    let detail = "";
    try {
      detail = (await res.json()).error ?? "";
    } catch {
      // not JSON: the status says enough
    }
    const what = `${init.method ?? "GET"} ${path.split("?")[0]} answered ${res.status}`;
    throw new ApiError(res.status, detail ? `${what}: ${detail}` : what);
  }
  return res.json();
}

/** The root session as the server lists it before the instance has a file. */
const EMPTY_ROOT = { id: "", created_at: 0, updated_at: 0, active_at: 0, message_count: 0, title: null };

/**
 * The instance's sessions ({id, created_at, updated_at, message_count, title}: title is what a
 * person named it, or null); an unknown instance has only its root.
 */
export async function listSessions(agent, name) {
  try {
    const { sessions } = await call(`${base(agent, name)}/sessions`);
    return Array.isArray(sessions) ? sessions : [EMPTY_ROOT];
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return [EMPTY_ROOT];
    throw e;
  }
}

/**
 * A new conversation's id, made here: the server creates the session with its first message, so a
 * New chat left empty leaves nothing behind.
 */
export function newSessionId() {
  return `c-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

/** Gives a session a title (null takes it away); the session as the server lists it. */
export function renameSession(agent, name, session, title) {
  // ?session= names the root session too (its empty id cannot be a path).
  return call(`${base(agent, name)}/session${session ? `?session=${encodeURIComponent(session)}` : ""}`, {
    method: "PATCH",
    body: JSON.stringify({ title })
  });
}

/** Deletes a session; the root one, which cannot be deleted, is emptied (and loses its title) instead. */
export async function deleteSession(agent, name, session) {
  if (session) return call(`${base(agent, name)}/sessions/${encodeURIComponent(session)}`, { method: "DELETE" });
  await call(`${base(agent, name)}/reset`, { method: "POST" });
  return renameSession(agent, name, "", null);
}

/** A session's transcript (UI messages, oldest first). */
export async function getMessages(agent, name, session) {
  const query = session ? `?session=${encodeURIComponent(session)}` : "";
  const messages = await call(`${base(agent, name)}/get-messages${query}`);
  return Array.isArray(messages) ? messages : [];
}

const TITLE_CHARS = 60;

/** What a conversation is called: its first user message's text, shortened; null if it has none. */
export function titleOf(messages) {
  const first = messages.find((m) => m?.role === "user");
  const text = (first?.parts ?? [])
    .filter((p) => p?.type === "text" && typeof p.text === "string")
    .map((p) => p.text)
    .join(" ")
    .replace(/\s+/g, " ")
    .trim();
  if (!text) return null;
  return text.length > TITLE_CHARS ? `${text.slice(0, TITLE_CHARS - 1)}…` : text;
}

/** The URL path of a workspace file: each part of the path encoded, the slashes kept. */
function filePath(agent, name, path) {
  return `${base(agent, name)}/files/${path.split("/").map(encodeURIComponent).join("/")}`;
}

/**
 * The instance's workspace files ({path, size, is_text, modified_at}), by path; an instance
 * without a file yet has none.
 */
export async function listFiles(agent, name) {
  try {
    const { files } = await call(`${base(agent, name)}/files`);
    return Array.isArray(files) ? files : [];
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return [];
    throw e;
  }
}

/** A text file's content. */
export async function readFile(agent, name, path) {
  const token = authToken();
  const url = filePath(agent, name, path);
  let res;
  try {
    res = await fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  } catch {
    throw new ApiError(0, AWAY);
  }
  if (!res.ok) throw new ApiError(res.status, `GET ${url} answered ${res.status}`);
  return res.text();
}

function sessionQuery(session) {
  return session ? `?session=${encodeURIComponent(session)}` : "";
}

/** The messages of the session's active path that have siblings: {messageId: [sibling ids, oldest first]}. */
export async function getForks(agent, name, session) {
  const { forks } = await call(`${base(agent, name)}/branches${sessionQuery(session)}`);
  return forks && typeof forks === "object" ? forks : {};
}

/** Makes the branch through a message the active path; every tab of the session gets the transcript. */
export function switchBranch(agent, name, session, messageId) {
  return call(`${base(agent, name)}/messages/${encodeURIComponent(messageId)}/branch${sessionQuery(session)}`, {
    method: "POST"
  });
}

/** Another model call continuing the last answer, in the same message (the tabs see it stream). */
export function continueAnswer(agent, name, session) {
  return call(`${base(agent, name)}/continue${sessionQuery(session)}`, { method: "POST" });
}
