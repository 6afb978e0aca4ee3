// Which conversation is open lives in the URL hash (#/agent/name), so a reload
// or a shared link opens the same one; the names used before are remembered
// in localStorage (the server keeps no list of them).

const STORE_KEY = "think-server:conversations";
const MAX_REMEMBERED = 30;
/** The characters a new conversation name may use (the server accepts more). */
export const NAME_PATTERN = "[A-Za-z0-9._\\-]{1,64}";
const NAME_RE = new RegExp(`^${NAME_PATTERN}$`);

export function isValidName(name) {
  return NAME_RE.test(name) && name !== "." && name !== "..";
}

export function newName() {
  const bytes = crypto.getRandomValues(new Uint8Array(4));
  return `chat-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** {agent, name} from "#/agent/name", or null. */
export function readHash(hash = window.location.hash) {
  const m = /^#\/([^/]+)\/([^/]+)$/.exec(hash);
  if (!m) return null;
  try {
    return { agent: decodeURIComponent(m[1]), name: decodeURIComponent(m[2]) };
  } catch {
    return null;
  }
}

export function hashOf({ agent, name }) {
  return `#/${encodeURIComponent(agent)}/${encodeURIComponent(name)}`;
}

function load() {
  try {
    const value = JSON.parse(localStorage.getItem(STORE_KEY) ?? "{}");
    return value && typeof value === "object" ? value : {};
  } catch {
    return {};
  }
}

/** The names remembered for an agent, most recent first. */
export function recentNames(agent) {
  const list = load()[agent];
  return Array.isArray(list) ? list.filter((n) => typeof n === "string") : [];
}

export function remember(agent, name) {
  const all = load();
  all[agent] = [name, ...recentNames(agent).filter((n) => n !== name)].slice(0, MAX_REMEMBERED);
  try {
    localStorage.setItem(STORE_KEY, JSON.stringify(all));
  } catch {
    // Private mode or a full store: the hash still keeps the current one.
  }
  return all[agent];
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
