// An assistant's text (and a markdown file) as markdown. The renderer and the highlighter are
// most of the page's weight, so they come in chunks of their own (MarkdownView.jsx, and
// rehype-highlight from there, at the first fenced block): this module asks for the renderer as
// soon as the page starts, in parallel with the page's own start, and renders nothing until it
// is here (the raw markdown would show, then change under the reader's eyes); if it cannot be
// fetched, the text shows as it is.
import { memo, useSyncExternalStore } from "react";

export { copyText } from "./copy.js";

let View = null;
let failed = false;
const waiting = new Set();
const settle = () => {
  for (const notify of waiting) notify();
};
import("./MarkdownView.jsx").then(
  (m) => {
    View = m.MarkdownView;
    settle();
  },
  () => {
    failed = true;
    settle();
  }
);

const subscribe = (notify) => {
  waiting.add(notify);
  return () => waiting.delete(notify);
};

/** Markdown text; re-rendered only when the text changes. */
export const Markdown = memo(function Markdown({ text }) {
  const Loaded = useSyncExternalStore(subscribe, () => View);
  if (Loaded) return <Loaded text={text} />;
  return failed ? <p className="markdown-plain">{text}</p> : null;
});
