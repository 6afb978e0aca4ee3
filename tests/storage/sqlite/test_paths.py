"""Where an instance's file lives: names a client sends never leave the data dir or share a file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from think_server.storage import InvalidNameError, validate_agent_name, validate_instance_name
from think_server.storage._names import MAX_INSTANCE_NAME
from think_server.storage.sqlite import instance_db_path

AGENT = "chat"
FILE_NAME = re.compile(r"[a-z0-9_-]{1,40}\.[0-9a-f]{32}\.sqlite3")


def _assert_inside(data_dir: Path, path: Path, agent: str = AGENT) -> None:
    root = data_dir.resolve()
    assert path.is_absolute()
    assert path.parent == root / "agents" / agent
    assert path.resolve() == path
    assert path.is_relative_to(root)
    assert FILE_NAME.fullmatch(path.name), path.name


# -- instance names that are refused -------------------------------------------------------------

REFUSED_INSTANCE_NAMES = [
    "",
    ".",
    "..",
    "../x",
    "../../etc/passwd",
    "..\\x",
    "a/b",
    "/",
    "/abs",
    "\\",
    "a\\b",
    "\x00",
    "a\x00b",
    "x\x00/../y",
    "\x01",
    "\t",
    "a\nb",
    "a\rb",
    "\x1b[31m",
    "\x1f",
    "\x7f",
    "x" * (MAX_INSTANCE_NAME + 1),
]


@pytest.mark.parametrize("name", REFUSED_INSTANCE_NAMES, ids=repr)
def test_refused_instance_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidNameError):
        validate_instance_name(name)
    with pytest.raises(InvalidNameError):
        instance_db_path(tmp_path, AGENT, name)


def test_invalid_name_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="instance name"):
        validate_instance_name("..")


def test_refusal_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(InvalidNameError):
        instance_db_path(tmp_path, AGENT, "../escape")
    assert list(tmp_path.iterdir()) == []


# -- instance names that are accepted ------------------------------------------------------------

ACCEPTED_INSTANCE_NAMES = [
    "a",
    "Alice",
    "...",
    "...." * 10,
    ". .",
    "..a",
    "a..",
    ".hidden",
    "~",
    "~root",
    "$HOME",
    "%2e%2e%2f",
    "..%2F..%2Fetc",
    "C:",
    "C:x",
    "con",
    "NUL",
    "*?<>|\"'",
    " ",
    "  spaced out  ",
    "\uff21\uff22\uff0f\uff3c",  # fullwidth A, B, slash and backslash
    "\u2215\u2044",  # division slash, fraction slash
    "日本語の名前",
    "emoji 🎉",
    "x" * MAX_INSTANCE_NAME,
    "é" * MAX_INSTANCE_NAME,
]


@pytest.mark.parametrize("name", ACCEPTED_INSTANCE_NAMES, ids=repr)
def test_accepted_names_stay_inside_the_data_dir(tmp_path: Path, name: str) -> None:
    assert validate_instance_name(name) == name
    _assert_inside(tmp_path, instance_db_path(tmp_path, AGENT, name))


def test_longest_name_gives_a_short_file_name(tmp_path: Path) -> None:
    path = instance_db_path(tmp_path, AGENT, "\U0001f600" * MAX_INSTANCE_NAME)
    assert len(path.name.encode()) <= 100
    path = instance_db_path(tmp_path, AGENT, "z" * MAX_INSTANCE_NAME)
    assert len(path.name.encode()) <= 100


def test_paths_are_stable(tmp_path: Path) -> None:
    """The derivation is part of the on-disk format: changing it orphans every existing file."""
    root = tmp_path.resolve()
    assert instance_db_path(tmp_path, "chat", "Alice") == (
        root / "agents" / "chat" / "alice.bf25fd7ca1e41998f316821bf72c803d.sqlite3"
    )
    assert instance_db_path(tmp_path, "chat", "Ünïcode Name!") == (
        root / "agents" / "chat" / "n_code_name.7ba231cee59a86c0bf9f804902a805db.sqlite3"
    )
    assert instance_db_path(tmp_path, "chat", "Alice") == instance_db_path(tmp_path, "chat", "Alice")


def test_name_made_only_of_dropped_characters_still_has_a_readable_part(tmp_path: Path) -> None:
    path = instance_db_path(tmp_path, AGENT, "!!!")
    assert path.name.startswith("_.")
    _assert_inside(tmp_path, path)


def test_readable_part_is_lowercase_and_safe(tmp_path: Path) -> None:
    path = instance_db_path(tmp_path, AGENT, "My Chat #1 (draft)")
    assert path.name.split(".")[0] == "my_chat_1_draft"


# -- distinct names get distinct files -----------------------------------------------------------

COLLIDING_IN_READABLE_PART = [
    ("Alice", "alice", "ALICE", "aLiCe"),
    ("a b", "a_b", "a!b", "a?b", "a  b", "a\u00a0b", "a.b", "a:b"),
    ("ab", "ab!", "!ab", "_ab_", "ab ", " ab", "ab."),
    ("x", "x\u00e9", "x\u4e2d", "x\U0001f600"),
    ("...", "....", "~", "!!!", "_", " "),
    ("a" * 40, "a" * 40 + "b", "a" * 41, "a" * 256),
]


@pytest.mark.parametrize("names", COLLIDING_IN_READABLE_PART, ids=lambda names: repr(names[0]))
def test_names_sharing_a_readable_part_get_different_files(tmp_path: Path, names: tuple[str, ...]) -> None:
    paths = [instance_db_path(tmp_path, AGENT, n) for n in names]
    assert len({p.name.split(".")[0] for p in paths}) == 1, "the group should share its readable part"
    assert len(set(paths)) == len(names)
    # A case-insensitive file system must not merge them either.
    assert len({str(p).casefold() for p in paths}) == len(names)


def test_same_instance_name_under_two_agents_gets_two_files(tmp_path: Path) -> None:
    a = instance_db_path(tmp_path, "alpha", "shared")
    b = instance_db_path(tmp_path, "beta", "shared")
    assert a != b
    assert a.name != b.name
    _assert_inside(tmp_path, a, "alpha")
    _assert_inside(tmp_path, b, "beta")


def test_agent_and_name_boundary_does_not_collide(tmp_path: Path) -> None:
    """("ab", "c") and ("a", "bc") concatenate alike; their digests must still differ."""
    one = instance_db_path(tmp_path, "ab", "c")
    two = instance_db_path(tmp_path, "a", "bc")
    assert one.name.split(".")[1] != two.name.split(".")[1]


# -- data dir handling ---------------------------------------------------------------------------


def test_relative_data_dir_is_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = instance_db_path(Path("data"), AGENT, "x")
    assert path.is_absolute()
    assert path.is_relative_to(tmp_path.resolve() / "data")


def test_symlinked_data_dir_is_resolved(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    path = instance_db_path(link, AGENT, "x")
    assert path.is_relative_to(real.resolve())


def test_path_derivation_touches_no_file(tmp_path: Path) -> None:
    path = instance_db_path(tmp_path, AGENT, "x")
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


# -- agent names ---------------------------------------------------------------------------------

VALID_AGENTS = ["a", "0", "chat", "my-agent", "agent-2", "a-", "9lives", "x" * 64, "a" + "-" * 63]


@pytest.mark.parametrize("agent", VALID_AGENTS)
def test_valid_agent_names(tmp_path: Path, agent: str) -> None:
    assert validate_agent_name(agent) == agent
    _assert_inside(tmp_path, instance_db_path(tmp_path, agent, "x"), agent)


INVALID_AGENTS = [
    "",
    "-a",
    "-",
    "A",
    "Chat",
    "my_agent",
    "my.agent",
    ".",
    "..",
    "../a",
    "a/b",
    "a\\b",
    "a b",
    " a",
    "a\n",
    "a\x00",
    "é",
    "x" * 65,
]


@pytest.mark.parametrize("agent", INVALID_AGENTS, ids=repr)
def test_invalid_agent_names(tmp_path: Path, agent: str) -> None:
    with pytest.raises(InvalidNameError, match="agent name"):
        validate_agent_name(agent)
    with pytest.raises(InvalidNameError):
        instance_db_path(tmp_path, agent, "x")


def test_a_relative_data_dir_is_under_the_working_dir_of_each_call(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    monkeypatch.chdir(tmp_path / "one")
    first = instance_db_path(Path("data"), "chat", "alice")
    monkeypatch.chdir(tmp_path / "two")
    second = instance_db_path(Path("data"), "chat", "alice")
    assert first.is_relative_to(tmp_path / "one") and second.is_relative_to(tmp_path / "two")
