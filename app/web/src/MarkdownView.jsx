// The markdown renderer (a chunk of its own: Markdown.jsx loads it): GitHub-flavoured markdown
// (react-markdown + remark-gfm), with code blocks highlighted (rehype-highlight, highlight.js's
// common languages) and a copy button on each. Raw HTML in the text is never rendered. A
// half-streamed text renders well as it is: an unclosed ``` fence is already a code block.
import { memo, useEffect, useRef, useState, useSyncExternalStore } from "react";
import ReactMarkdown from "react-markdown";
import remarkGfm from "remark-gfm";
import { copyText } from "./copy.js";

const REMARK = [remarkGfm];
const PLAIN = [];

// The highlighter is most of the page's weight (highlight.js and its languages): it comes in a
// chunk of its own, fetched the first time a text has a fenced block; until then (and if it
// cannot be fetched) the code shows plain.
let rehype = null;
let loading = null;
const waiting = new Set();

function loadHighlighter() {
  loading ??= import("rehype-highlight").then(
    (m) => {
      // Only fenced blocks that name their language are highlighted: guessing one is slow and often wrong.
      rehype = [[m.default, { detect: false }]];
      for (const notify of waiting) notify();
    },
    () => {
      loading = null; // tried again at the next fenced block
    }
  );
  return loading;
}

const subscribe = (notify) => {
  waiting.add(notify);
  return () => waiting.delete(notify);
};

/** The rehype plugins for ``text``: the highlighter once loaded, which a fenced block asks for. */
function useRehype(text) {
  const plugins = useSyncExternalStore(subscribe, () => rehype);
  const fenced = !plugins && /^ {0,3}(```|~~~)/m.test(text ?? "");
  useEffect(() => {
    if (fenced) loadHighlighter();
  }, [fenced]);
  return plugins ?? PLAIN;
}

function CodeBlock({ children, node: _node, ...props }) {
  const pre = useRef(null);
  const [copied, setCopied] = useState(null);
  const code = Array.isArray(children) ? children[0] : children;
  const lang = /language-([\w+#.-]+)/.exec(code?.props?.className ?? "")?.[1];
  const onCopy = async () => {
    try {
      await copyText(pre.current?.querySelector("code")?.textContent ?? pre.current?.textContent ?? "");
      setCopied("Copied");
    } catch {
      setCopied("Cannot copy");
    }
    setTimeout(() => setCopied(null), 1500);
  };
  return (
    <div className="code-block">
      <div className="code-bar">
        <span className="code-lang">{lang ?? "code"}</span>
        <button type="button" className="copy" onClick={onCopy} aria-label={copied ?? "Copy code"}>
          {copied ?? "Copy"}
        </button>
      </div>
      <pre ref={pre} {...props}>
        {children}
      </pre>
    </div>
  );
}

function Link({ node: _node, ...props }) {
  return <a {...props} target="_blank" rel="noreferrer noopener" />;
}

const COMPONENTS = { pre: CodeBlock, a: Link };

/** Markdown text; re-rendered only when the text changes. */
export const MarkdownView = memo(function MarkdownView({ text }) {
  const rehypePlugins = useRehype(text);
  return (
    <ReactMarkdown remarkPlugins={REMARK} rehypePlugins={rehypePlugins} components={COMPONENTS}>
      {text}
    </ReactMarkdown>
  );
});
