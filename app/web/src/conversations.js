// Which conversation is open lives in the URL hash (#/agent/name/session), so a
// reload or a shared link opens the same one. The conversations themselves are
// sessions of one agent instance (/agents/agent/name), kept and listed by the
// server (GET .../sessions); "#/agent/name" alone is the instance's root session.

/** The instance the page uses when the hash names none. */
export const DEFAULT_NAME = "default";
/** The characters an instance name may use here (the server accepts more). */
const NAME_RE = /^[A-Za-z0-9._-]{1,64}$/;
/** A session id as the server takes it (the root session is ""). */
const SESSION_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

export function isValidName(name) {
  return NAME_RE.test(name) && name !== "." && name !== "..";
}

export function isValidSession(session) {
  return session === "" || SESSION_RE.test(session);
}

/** {agent, name, session} from "#/agent/name" or "#/agent/name/session", or null. */
export function readHash(hash = window.location.hash) {
  const m = /^#\/([^/]+)\/([^/]+)(?:\/([^/]*))?$/.exec(hash);
  if (!m) return null;
  try {
    return {
      agent: decodeURIComponent(m[1]),
      name: decodeURIComponent(m[2]),
      session: m[3] ? decodeURIComponent(m[3]) : ""
    };
  } catch {
    return null;
  }
}

export function hashOf({ agent, name, session = "" }) {
  const base = `#/${encodeURIComponent(agent)}/${encodeURIComponent(name)}`;
  return session ? `${base}/${encodeURIComponent(session)}` : base;
}

// Before the server kept sessions, the page made one instance per conversation and
// remembered their names in this browser. They are only read now, so those
// conversations stay reachable; nothing is written there any more.
const OLD_STORE_KEY = "think-server:conversations";

/** The instance names an earlier version of the page remembered for an agent. */
export function earlierNames(agent) {
  try {
    const list = JSON.parse(localStorage.getItem(OLD_STORE_KEY) ?? "{}")?.[agent];
    return Array.isArray(list) ? list.filter((n) => typeof n === "string" && isValidName(n)) : [];
  } catch {
    return [];
  }
}

const TOKEN_KEY = "think-server:token";

/**
 * The bearer token when the server has auth on: open the page once as
 * `/?token=...`; it is kept for this tab (sessionStorage) and dropped from the URL.
 */
export function authToken() {
  const url = new URL(window.location.href);
  const given = url.searchParams.get("token");
  if (given) {
    sessionStorage.setItem(TOKEN_KEY, given);
    url.searchParams.delete("token");
    window.history.replaceState(null, "", url.toString());
  }
  return sessionStorage.getItem(TOKEN_KEY) || null;
}
