// Builds the chat page into dist/, which think-server serves at / (app/_web.py).
// JSX goes through Vite's own transform (no React plugin: there is no dev-only
// fast refresh to support, and one package fewer to pin).
import { defineConfig } from "vite";

// What a first visit must download and run before the page shows: index.html's own scripts and
// the modules it preloads (the chat, the markdown renderer and the highlighter are chunks fetched
// after). Minified, before compression, in kB of 1000 bytes as Vite prints them.
const INITIAL_JS_LIMIT_KB = 400;

function initialJsBudget() {
  return {
    name: "initial-js-budget",
    writeBundle(_options, bundle) {
      const html = bundle["index.html"];
      if (!html) return;
      const text = typeof html.source === "string" ? html.source : new TextDecoder().decode(html.source);
      const eager = [...text.matchAll(/<(?:script[^>]*\ssrc|link[^>]*rel="modulepreload"[^>]*\shref)="\/([^"]+\.js)"/g)].map(
        (m) => m[1]
      );
      const bytes = eager.reduce((sum, file) => sum + new TextEncoder().encode(bundle[file]?.code ?? "").length, 0);
      const kb = bytes / 1000;
      const line = `initial JS: ${kb.toFixed(1)} kB (limit ${INITIAL_JS_LIMIT_KB} kB): ${eager.join(", ")}`;
      if (kb > INITIAL_JS_LIMIT_KB) this.error(`${line}; over the limit: load more of it on demand (a dynamic import())`);
      console.log(line);
    }
  };
}

export default defineConfig({
  root: import.meta.dirname,
  plugins: [initialJsBudget()],
  base: "/",
  oxc: {
    jsx: { runtime: "automatic", importSource: "react" }
  },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsDir: "assets",
    target: "es2022",
    sourcemap: false,
    // The largest chunk, the chat's (the hooks and the AI SDK), is about 330 kB; what loads first is
    // held to INITIAL_JS_LIMIT_KB by the plugin above.
    chunkSizeWarningLimit: 500,
    rolldownOptions: {
      onLog(level, log, handler) {
        // swr (under @ai-sdk/react) marks its modules "use client": meaningless in a client-only bundle.
        if (log.code === "MODULE_LEVEL_DIRECTIVE") return;
        handler(level, log);
      }
    }
  },
  server: {
    // `npm run dev`: the page on Vite's server, the chat on a running think-server.
    proxy: {
      "/api": "http://127.0.0.1:8000",
      "/agents": { target: "http://127.0.0.1:8000", ws: true }
    }
  }
});
