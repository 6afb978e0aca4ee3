// What drive.mjs and usechat.mjs say, the way both say it: one JSON object per line on stdout
// ("ev", "t" in ms since start, then the event's fields), and one "end" line before the exit.

const T0 = performance.now();
let finished = false;

export function emit(ev, data = {}) {
  const line = { ev, t: Math.round(performance.now() - T0), ...data };
  let text;
  try {
    text = JSON.stringify(line);
  } catch (e) {
    text = JSON.stringify({ ev, t: line.t, unserializable: String(e) });
  }
  process.stdout.write(text + "\n");
}

export function errInfo(e) {
  if (e instanceof Error) return { error: e.message, name: e.name, stack: e.stack };
  return { error: String(e) };
}

export function isFinished() {
  return finished;
}

export function finish(ok, extra = {}) {
  if (finished) return;
  finished = true;
  emit("end", { ok, ...extra });
  // Let stdout drain, then leave even if sockets/timers are still alive.
  const code = ok ? 0 : 1;
  process.stdout.write("", () => process.exit(code));
  setTimeout(() => process.exit(code), 500).unref();
}

export function fatal(where, e) {
  emit("fatal", { where, ...errInfo(e) });
  finish(false, { reason: where });
}

process.on("uncaughtException", (e) => fatal("uncaughtException", e));
process.on("unhandledRejection", (e) => fatal("unhandledRejection", e));
