"""The workspace's matching, without backtracking: its globs and its grep.

Both compile to RE2 (``google-re2``), whose automata run in time linear in the text they read:
no glob or pattern, a client's or a model's (or a prompt injection's), can make a scan take the
exponential time Python's backtracking ``re`` can (``*a*a*a*a*b`` over one 255-character name took
it 12 s, one ``*`` more minutes, with the event loop frozen all along). What here is synchronous
runs in a worker thread (:func:`in_scan_thread`); RE2 lets go of the GIL while it matches, so the
event loop serves others meanwhile.

``re2`` is imported by the first glob or grep (in a scan thread, ~3 ms), not with the harness: a
server whose agents never scan a workspace does not carry it (2.5 MB).
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import functools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ParamSpec, Protocol, TypeVar

__all__ = ["MAX_GLOB", "MAX_PATTERN", "BadPattern", "GrepCut", "GrepScan", "compile_glob", "compile_pattern",
           "in_scan_thread"]

#: The most characters of a glob. A path has at most 512, so a longer glob names nothing a path
#: could be; the bound keeps the glob's automaton (built per glob, run over up to 10,000 paths) small.
MAX_GLOB = 1024
#: The most characters of a grep pattern. RE2 is linear in the text, times a factor that grows
#: with the pattern: some drive it from its DFA to its NFA, measured at 10-33 s a MB for patterns
#: of up to 1,000 characters and ~160 s a MB for one of 12,000. The time budget is checked between
#: lines and cannot stop the search of one (up to a file's 1 MB), so patterns are kept short.
MAX_PATTERN = 1000
#: The most characters of a matching line that an answer shows.
MAX_LINE = 500


class BadPattern(ValueError):
    """A glob or a pattern that cannot be compiled; the message says why."""


class Matcher(Protocol):
    """The part of a compiled ``re2`` expression used here (the package ships no type hints)."""

    def search(self, text: str) -> object | None: ...

    def fullmatch(self, text: str) -> object | None: ...


class GrepCut(enum.Enum):
    """Why a grep stopped before it searched every file."""

    MATCHES = "matches"  # it found as many matches as it answers with
    BYTES = "bytes"  # the next file would take it past its budget of bytes
    TIME = "time"  # its time ran out


_P = ParamSpec("_P")
_T = TypeVar("_T")
#: The scans' own threads: a long search (one long line under a costly pattern) holds one of these,
#: never one of the default executor's, which open the instances' databases.
_SCANS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="workspace-scan")


async def in_scan_thread(fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """``asyncio.to_thread``, on the scans' threads."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_SCANS, call)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")  # what RE2 reads
    except UnicodeEncodeError:
        raise BadPattern("it holds a lone surrogate, which is not text (UTF-8)") from None


def _compile(regex: str, *, dot_nl: bool = False) -> Matcher:
    _check_text(regex)
    import re2  # after the first, a lookup in sys.modules

    options = re2.Options()
    options.log_errors = False  # a bad pattern is the caller's error, not a line on the server's stderr
    options.dot_nl = dot_nl
    try:
        compiled: Matcher = re2.compile(regex, options)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else ""
        raise BadPattern(detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)) from None
    return compiled


def glob_regex(glob: str) -> str:
    """The RE2 expression (to be matched whole) of ``glob``: ``*`` within a part, ``**`` across parts,
    ``**/`` any folders (or none), ``?`` one character but ``/``; the rest stands for itself."""
    from re2 import escape
    out: list[str] = []
    literal: list[str] = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            token, i = "(?:.*/)?", i + 3
        elif glob.startswith("**", i):
            token, i = ".*", i + 2
        elif glob[i] == "*":
            token, i = "[^/]*", i + 1
        elif glob[i] == "?":
            token, i = "[^/]", i + 1
        else:
            literal.append(glob[i])
            i += 1
            continue
        if literal:
            out.append(escape("".join(literal)))
            literal = []
        out.append(token)
    if literal:
        out.append(escape("".join(literal)))
    return "".join(out)


def compile_glob(glob: str) -> Matcher:
    """A matcher of ``glob`` (see :func:`glob_regex`): its ``fullmatch(path)`` runs in time linear in
    the path, whatever the glob."""
    if len(glob) > MAX_GLOB:
        raise BadPattern(f"a glob has at most {MAX_GLOB} characters; got {len(glob)}")
    try:
        _check_text(glob)
        return _compile(glob_regex(glob), dot_nl=True)
    except BadPattern as exc:
        raise BadPattern(f"not a glob the workspace can match: {exc}") from None


def compile_pattern(pattern: str) -> Matcher:
    """``pattern`` (RE2 syntax) compiled, or :class:`BadPattern` naming what RE2 does not support."""
    if len(pattern) > MAX_PATTERN:
        raise BadPattern(f"a pattern has at most {MAX_PATTERN} characters; got {len(pattern)}")
    try:
        return _compile(pattern)
    except BadPattern as exc:
        detail = str(exc)
        if any(op in detail for op in ("(?=", "(?!", "(?<=", "(?<!")):
            why = ": grep matches in linear time (RE2), without lookaround ((?=...), (?!...), (?<=...), (?<!...))"
        elif ("(?P" in detail and "(?P=" in pattern) or any(f"\\{d}" in detail for d in "123456789"):
            why = r": grep matches in linear time (RE2), without backreferences (\1, (?P=name))"
        elif "\\Z" in detail:
            why = r": RE2 writes the end of the text \z, not \Z"
        else:
            why = ""
        raise BadPattern(f"not a regular expression in RE2 syntax ({detail}){why}") from None


@dataclass
class GrepScan:
    """One grep's search, fed the workspace's text files a batch at a time (each batch in a worker
    thread, one batch after another): the matching lines, up to ``max_matches``, until ``deadline``
    (``time.monotonic()``) passes, checked before each line."""

    regex: Matcher
    max_matches: int
    deadline: float
    matches: list[tuple[str, int, str]] = field(default_factory=list)
    files_searched: int = 0
    bytes_searched: int = 0
    cut: GrepCut | None = None

    def scan(self, files: Sequence[tuple[str, str, int]]) -> None:
        """Search each (path, text, size) in turn; stop (setting :attr:`cut`) at the cap or the deadline."""
        search, found = self.regex.search, self.matches
        for path, text, size in files:
            for n, line in enumerate(text.splitlines(), 1):
                if time.monotonic() > self.deadline:
                    self.cut = GrepCut.TIME
                    return
                if search(line) is not None:
                    found.append((path, n, line[:MAX_LINE]))
                    if len(found) >= self.max_matches:
                        self.cut = GrepCut.MATCHES
                        return
            self.files_searched += 1
            self.bytes_searched += size
