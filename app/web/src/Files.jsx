// The instance's workspace beside the conversation: the files its agent keeps (a list, and a
// read-only view of one). The files belong to the instance, so every conversation of it shows
// the same ones; the list is read again after each answer.
import { createContext, useCallback, useEffect, useRef, useState } from "react";
import { AWAY, listFiles, readFile } from "./api.js";
import { Markdown, copyText } from "./Markdown.jsx";

/** Opens a file in the panel (the tool cards of the file tools use it); null without a panel. */
export const FileOpener = createContext(null);

/** The names of the workspace's file tools, and what of their input names a file. */
export const FILE_TOOLS = { read: "path", write: "path", edit: "path", delete: "path", list: null, find: "glob", grep: "pattern" };

function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
}

/** The files and the one open: read when the instance changes, when `version` does, and on demand. */
export function useFiles(agent, name, version) {
  const [files, setFiles] = useState(null);
  const [error, setError] = useState(null);
  const [openPath, setOpenPath] = useState(null);
  const refresh = useCallback(() => {
    if (!agent || !name) return undefined;
    let live = true;
    listFiles(agent, name)
      .then((list) => live && (setFiles(list), setError(null)))
      .catch((e) => live && setError(e.message));
    return () => {
      live = false;
    };
  }, [agent, name]);
  useEffect(() => refresh(), [refresh, version]);
  // While the server is away, asked again every few seconds: the panel comes back with it.
  useEffect(() => {
    if (error !== AWAY) return undefined;
    let stop = null;
    const timer = setInterval(() => {
      stop?.();
      stop = refresh();
    }, 4000);
    return () => {
      clearInterval(timer);
      stop?.();
    };
  }, [error, refresh]);
  useEffect(() => setOpenPath(null), [agent, name]);
  return { files, error, refresh, openPath, open: setOpenPath };
}

const isMarkdown = (path) => /\.(md|markdown|mdx)$/i.test(path ?? "");

/** Copy and Download of a text file's content, as it was read. */
function FileActions({ path, content, source, onSource }) {
  const [copied, setCopied] = useState(null);
  const onCopy = async () => {
    try {
      await copyText(content);
      setCopied("Copied");
    } catch {
      setCopied("Cannot copy");
    }
    setTimeout(() => setCopied(null), 1500);
  };
  // From what the page holds, not a link to the file: a link cannot carry the bearer token.
  const onDownload = () => {
    const url = URL.createObjectURL(new Blob([content], { type: isMarkdown(path) ? "text/markdown" : "text/plain" }));
    const a = document.createElement("a");
    a.href = url;
    a.download = path.split("/").pop() || "file.txt";
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  };
  return (
    <div className="file-actions">
      {onSource && (
        <button type="button" className="secondary" aria-pressed={source} onClick={() => onSource(!source)}>
          Source
        </button>
      )}
      <button type="button" className="secondary" onClick={onCopy} aria-label={copied ?? `Copy ${path}`}>
        {copied ?? "Copy"}
      </button>
      <button type="button" className="secondary" onClick={onDownload} aria-label={`Download ${path}`}>
        Download
      </button>
    </div>
  );
}

function FileView({ agent, name, file, version, onBack }) {
  const [content, setContent] = useState(null);
  const [source, setSource] = useState(false); // a markdown file's own text rather than rendered
  const [error, setError] = useState(null);
  useEffect(() => {
    let live = true;
    setError(null);
    if (!file?.is_text) {
      setContent(null);
      return undefined;
    }
    readFile(agent, name, file.path)
      .then((text) => live && setContent(text))
      .catch((e) => live && setError(e.message));
    return () => {
      live = false;
    };
  }, [agent, name, file?.path, file?.is_text, file?.modified_at, version]);
  return (
    <div className="file-view" data-path={file?.path ?? ""}>
      <div className="file-view-head">
        <button type="button" className="secondary back" onClick={onBack}>
          ← All files
        </button>
        <h3 className="file-path">{file?.path}</h3>
      </div>
      {!file && <p className="file-note">This file is gone.</p>}
      {file && (
        <p className="file-meta">
          {size(file.size)} · changed {new Date(file.modified_at).toLocaleString()}
        </p>
      )}
      {error && (
        <p className="files-error" role="alert">
          {error}
        </p>
      )}
      {file && !file.is_text && <p className="file-note">Binary content: not shown.</p>}
      {file?.is_text && content !== null && (
        <FileActions
          path={file.path}
          content={content}
          source={source}
          onSource={isMarkdown(file.path) ? setSource : null}
        />
      )}
      {file?.is_text && content !== null && isMarkdown(file.path) && !source && (
        <div className="file-content file-markdown text" role="document" aria-label={`Content of ${file.path}`} tabIndex={0}>
          <Markdown text={content} />
        </div>
      )}
      {file?.is_text && content !== null && (!isMarkdown(file.path) || source) && (
        <pre className="file-content" aria-label={`Content of ${file.path}`} tabIndex={0}>
          {content}
        </pre>
      )}
    </div>
  );
}

/** The panel: nothing at all while the instance has no file (most agents keep none). */
export function Files({ agent, name, state, version, sheet = false, onCloseSheet = () => {} }) {
  const { files, error, refresh, openPath, open } = state;
  const close = useRef(null);
  useEffect(() => {
    if (sheet) close.current?.focus(); // into the sheet (at phone width; elsewhere it is hidden)
  }, [sheet]);
  const away = error === AWAY; // said calmly, as the chat says it; nothing at all without files to show
  if (!files?.length && !openPath && (!error || away)) return null;
  const shown = openPath !== null ? files?.find((f) => f.path === openPath) : undefined;
  return (
    <aside
      className="files"
      id="files"
      aria-label="Files"
      data-sheet={sheet ? "open" : "closed"}
      onKeyDown={(e) => {
        if (e.key === "Escape" && sheet && !e.defaultPrevented) {
          e.preventDefault();
          onCloseSheet();
        }
      }}
    >
      <div className="files-head">
        <h2>Files</h2>
        <button type="button" className="secondary sheet-close" ref={close} onClick={onCloseSheet} aria-label="Close files">
          Close
        </button>
        <button type="button" className="secondary refresh" onClick={refresh} title="Read the list again">
          Refresh
        </button>
      </div>
      {away && (
        <p className="banner calm" aria-live="polite" data-testid="files-banner">
          <span className="banner-text">{AWAY}</span>
        </p>
      )}
      {error && !away && (
        <p className="files-error" role="alert">
          {error}
        </p>
      )}
      {openPath !== null ? (
        <FileView agent={agent} name={name} file={shown} version={version} onBack={() => open(null)} />
      ) : (
        <ul className="file-list">
          {(files ?? []).map((f) => (
            <li key={f.path}>
              <button type="button" className="file" data-path={f.path} onClick={() => open(f.path)}>
                <span className="file-name">{f.path}</span>
                <span className="file-size">{size(f.size)}</span>
              </button>
            </li>
          ))}
        </ul>
      )}
    </aside>
  );
}
