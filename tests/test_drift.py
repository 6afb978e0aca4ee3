"""Copies and lists that must not drift from what they copy or list.

The reference script is the shared one (the conformance checker and the benchmarks drive
the server with it); the README's settings table names every setting the server takes.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from think_server.app.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "fixtures" / "reference-script.json"
# The shared script's sha256: checked against the shared folder when it is beside the
# repository (then this pin must be current too), and on its own where it is not (a CI
# checkout of this repository alone), so that the copy is never left unchecked.
REFERENCE_SHA256 = "a689743ab67e760affd6c6b2c471f601075dbe5bcaa413fb55034407f4c49e99"


def shared_reference() -> Path:
    shared = Path(os.environ.get("THINK_SHARED_DIR", ROOT.parent / "shared"))
    return shared / "conformance" / "reference-script.json"


def test_the_reference_script_is_the_shared_one() -> None:
    ours = REFERENCE.read_bytes()
    shared = shared_reference()
    if shared.is_file():
        assert ours == shared.read_bytes(), f"{REFERENCE} differs from {shared}: copy the shared one over it"
        assert hashlib.sha256(ours).hexdigest() == REFERENCE_SHA256, (
            f"the shared script changed: set REFERENCE_SHA256 to {hashlib.sha256(ours).hexdigest()}")
    else:
        assert hashlib.sha256(ours).hexdigest() == REFERENCE_SHA256, (
            f"{REFERENCE} is not the shared script this repository pins ({shared} is not here to compare)")


def test_the_harness_tests_use_the_one_copy_of_the_reference_script() -> None:
    copies = sorted(p.relative_to(ROOT) for p in (ROOT / "tests").rglob("reference-script.json"))
    assert copies == [REFERENCE.relative_to(ROOT)], f"expected one copy, found {copies}"


def settings_table() -> str:
    """The table under the README's ``### Settings`` heading."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n### Settings\n", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows, "no table under ### Settings in README.md"
    return "\n".join(rows)


def test_every_setting_is_in_the_readme_settings_table() -> None:
    table = settings_table()
    named = set(re.findall(rf"`({ENV_PREFIX}[A-Z0-9_]+)`", table))
    missing = [f"{ENV_PREFIX}{field.upper()}" for field in Settings.model_fields
               if f"{ENV_PREFIX}{field.upper()}" not in named]
    assert missing == [], f"settings missing from README.md's settings table: {missing}"


def test_every_setting_is_named_in_python_too() -> None:
    """The README says a setting's Python name is its variable in lower case without the prefix:
    true of every field, so that the table is the list of ``Settings`` fields too."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`Settings(...)` takes each one by its name in lower case without\n`THINK_`" in readme
    named = {n.removeprefix(ENV_PREFIX).lower() for n in re.findall(rf"`({ENV_PREFIX}[A-Z0-9_]+)`", settings_table())}
    assert sorted(set(Settings.model_fields) - named) == []


def test_every_hook_contexts_field_is_in_the_readme() -> None:
    import dataclasses

    from think_server.harness import agent as hooks

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n### Hooks\n", 1)[1].split("\n### ", 1)[0]
    common = next(p for p in section.split("\n\n") if p.startswith("Every context has"))
    base = {f.name for f in dataclasses.fields(hooks.HookContext)}
    assert [n for n in sorted(base) if f"`{n}`" not in common] == [], "the fields every context has"
    missing = []
    for context in (hooks.TurnContext, hooks.ToolCallContext, hooks.StepContext, hooks.ChunkContext,
                    hooks.ErrorContext, hooks.RecoveryContext, hooks.TurnEndContext):
        rows = "\n".join(line for line in section.splitlines() if f"({context.__name__})" in line)
        assert rows, f"no row of the hooks table names {context.__name__}"
        missing += [f"{context.__name__}.{f.name}" for f in dataclasses.fields(context)
                    if f.name not in base and f"`{f.name}`" not in rows]
    assert missing == [], f"hook context fields the README's hooks table does not name: {missing}"


def test_the_longest_files_run_first_are_test_files_that_exist() -> None:
    # A renamed file would leave its name in the list doing nothing, and the file last in the queue.
    from tests.conftest import LONGEST_FILES

    root = Path(__file__).parent.parent
    assert [f for f in LONGEST_FILES if not (root / f).is_file()] == []
    assert len(set(LONGEST_FILES)) == len(LONGEST_FILES)
