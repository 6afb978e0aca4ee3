"""The workspace's matching without backtracking: its globs (the same answers as the former
backtracking translation) and grep's patterns (RE2 syntax, with clear errors for what it lacks)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from think_server.harness.toolsets._workspace_scan import (
    MAX_GLOB,
    MAX_PATTERN,
    BadPattern,
    compile_glob,
    compile_pattern,
    glob_regex,
)


def backtracking_glob(glob: str) -> re.Pattern[str]:
    """The glob translation the workspace used before (Python's backtracking ``re``): the reference
    for the answers on inputs too small for its exponential cases to show."""
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


@pytest.mark.parametrize(("glob", "path", "matches"), [
    ("notes/*.md", "notes/todo.md", True),
    ("notes/*.md", "notes/2026/todo.md", False),  # '*' stays in a folder
    ("*.md", "notes/todo.md", False),
    ("*", "", True),
    ("**/*.md", "todo.md", True),  # '**/' is any folders, or none
    ("**/*.md", "a/b/c/todo.md", True),
    ("**/*.md", "a/b/todo.txt", False),
    ("a/**/b", "a/b", True),
    ("a/**/b", "a/x/y/b", True),
    ("a/**/b", "a/xb", False),
    ("a/**", "a/b/c", True),
    ("a/**", "a", False),
    ("**.md", "a/b/c.md", True),  # '**' without a '/' crosses folders too
    ("a**b", "a/x/b", True),
    ("***/x", "x", False),  # '**' then '*/': a folder is needed
    ("***/x", "a/b/x", True),
    ("?.txt", "a.txt", True),
    ("?.txt", "ab.txt", False),
    ("a?b", "a/b", False),  # '?' is one character but '/'
    ("a?c", "aéc", True),  # one character, not one byte
    ("a.b", "a.b", True),  # regex metacharacters stand for themselves
    ("a.b", "axb", False),
    ("a+b", "a+b", True),
    ("a+b", "aab", False),
    ("(x)", "(x)", True),
    ("(x)", "x", False),
    ("[ab]", "[ab]", True),
    ("[ab]", "a", False),
    ("a|b", "a|b", True),
    ("a|b", "a", False),
    ("^$", "^$", True),
    ("{1,2}\\d", "{1,2}\\d", True),
    ("x{2}", "xx", False),
    ("café/*", "café/menu.txt", True),
    ("NOTES/*", "notes/a", False),  # case counts
])
def test_ordinary_globs_answer_as_before(glob: str, path: str, matches: bool) -> None:
    assert (compile_glob(glob).fullmatch(path) is not None) is matches
    assert (backtracking_glob(glob).match(path) is not None) is matches


GLOB_PIECES = ["a", "b", "/", "*", "**", "**/", "?", ".", "+", "(", ")", "[", "]", "|", "\\", "é", "{2}"]
PATH_PIECES = ["a", "b", "/", ".", "+", "(", ")", "[", "]", "|", "\\", "é", "ab/", "x.md", "{2}"]


@settings(max_examples=500, deadline=None)
@given(glob=st.lists(st.sampled_from(GLOB_PIECES), max_size=7).map("".join),
       path=st.lists(st.sampled_from(PATH_PIECES), max_size=8).map("".join))
def test_any_small_glob_answers_as_the_backtracking_translation(glob: str, path: str) -> None:
    assert (compile_glob(glob).fullmatch(path) is not None) == (backtracking_glob(glob).match(path) is not None)


def test_a_glob_becomes_the_same_expression_as_before_with_re2_quoting_its_literals() -> None:
    assert glob_regex("**/notes/*.m?") == r"(?:.*/)?notes\/[^/]*\.m[^/]"


def test_a_glob_past_its_length_is_refused() -> None:
    compile_glob("*" * MAX_GLOB)
    with pytest.raises(BadPattern, match=f"a glob has at most {MAX_GLOB} characters; got {MAX_GLOB + 1}"):
        compile_glob("*" * (MAX_GLOB + 1))
    with pytest.raises(BadPattern, match="lone surrogate"):
        compile_glob("a\ud800*")


@pytest.mark.parametrize(("pattern", "says"), [
    (r"(a)\1", r"\(invalid escape sequence: \\1\): grep matches in linear time \(RE2\), without backreferences"),
    (r"(?P<x>a)(?P=x)", "backreferences"),
    (r"foo(?=bar)", r"without lookaround \(\(\?=\.\.\.\)"),
    (r"(?<!x)y", "lookaround"),
    (r"end\Z", r"RE2 writes the end of the text \\z"),
    ("(", r"not a regular expression in RE2 syntax \(missing \): \(\)"),
    ("a\ud800", "lone surrogate"),
    ("x" * (MAX_PATTERN + 1), f"a pattern has at most {MAX_PATTERN} characters; got {MAX_PATTERN + 1}"),
])
def test_a_pattern_re2_cannot_run_gets_an_error_naming_what(pattern: str, says: str) -> None:
    with pytest.raises(BadPattern, match=says) as err:
        compile_pattern(pattern)
    assert "RE2 syntax" in str(err.value) or "at most" in str(err.value)


def test_re2_syntax_that_python_shares_is_taken() -> None:
    assert compile_pattern(r"(?i)call \w+").search("- CALL Ann") is not None
    assert compile_pattern(r"(?P<who>Ann|Bob)\b").search("ask Bob") is not None
    assert compile_pattern(r"^\s*- \[ \]").search("  - [ ] tea") is not None
    assert compile_pattern(r"x\z").search("box") is not None
