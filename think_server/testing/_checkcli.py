"""``think-server check URL``: the command line of the scenarios in ``_check``, and its table."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any, TextIO
from urllib.parse import urlsplit

from ._check import CHECK_TOOL, SCENARIOS, CheckOptions, Outcome, run_check

__all__ = ["CheckCommand", "check_main"]

_EPILOG = f"""\
scenarios (in this order): {", ".join(name for name, _ in SCENARIOS)}
Each uses a new instance under URL (check-<random>-<scenario>). They assert shapes and order, never
a model's words, so they hold on a real model. approval runs with --approval-prompt (the call is
denied: a check never runs a tool that needs a person's yes); client-tool with --client-tool-prompt,
which must make the model call the client tool the check declares, {CHECK_TOOL["name"]}.
Exit status: 0 nothing failed (skipped is not a failure); 1 a scenario failed; 2 bad arguments;
130 interrupted.
"""


def agent_url_problem(url: str) -> str | None:
    """Why ``url`` is not an agent's address ``http(s)://host[:port][/prefix]/agents/{agent}``, or None."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"expected an http:// or https:// address, got {url!r}"
    if len(segments) < 2 or segments[-2] != "agents":
        return ("expected the agent's address, ending in /agents/AGENT (e.g. "
                f"http://127.0.0.1:8000/agents/assistant), got {url!r}")
    if parts.query or parts.fragment:
        return f"expected no query or fragment (the token goes in --token), got {url!r}"
    return None


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``check`` to the ``think-server`` subcommands (``sub``: argparse's subparsers)."""
    check: argparse.ArgumentParser = sub.add_parser(
        "check", help="run the protocol scenarios against a deployed agent and print a table",
        description="Check that a deployment keeps the chat protocol's promises: connect, stream, cancel, reload and "
                    "resume, two tabs, get-messages and its pages, approvals and client tools.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("url", metavar="URL", help="the agent's address: http(s)://host:port/agents/AGENT")
    check.add_argument("--token", help="the bearer token when auth is on (default: $THINK_AUTH_TOKEN)")
    check.add_argument("--timeout", type=float, default=30.0, metavar="S",
                       help="seconds any one wait may last (default: 30)")
    check.add_argument("--only", nargs="+", choices=[name for name, _ in SCENARIOS], metavar="NAME",
                       help="run only these scenarios")
    check.add_argument("--prompt", default=CheckOptions.prompt, help="a prompt any agent answers")
    check.add_argument("--long-prompt", default=CheckOptions.long_prompt,
                       help="a prompt whose answer streams long enough to cancel and reload mid-way")
    check.add_argument("--approval-prompt", metavar="TEXT",
                       help="a prompt that makes the model call a tool needing approval (else approval is skipped)")
    check.add_argument("--client-tool-prompt", metavar="TEXT",
                       help=f"a prompt that makes the model call the client tool {CHECK_TOOL['name']} "
                            "(else client-tool is skipped)")
    return check


def format_row(outcome: Outcome) -> str:
    return f"{outcome.name:<13} {outcome.result:<8} {outcome.seconds:>6.2f}s  {outcome.detail}"


def check_main(args: dict[str, Any], out: TextIO | None = None) -> int:
    """Run ``check`` with parsed arguments; print a row per scenario as it ends; the exit status."""
    out = out or sys.stdout
    url = args["url"]
    problem = agent_url_problem(url)
    if problem is not None or args["timeout"] <= 0:
        print(f"think-server check: {problem or 'expected --timeout above 0, got ' + str(args['timeout'])}",
              file=sys.stderr)
        return 2
    options = CheckOptions(
        url=url.rstrip("/"), token=args["token"] or os.environ.get("THINK_AUTH_TOKEN") or None,
        timeout=args["timeout"], prompt=args["prompt"], long_prompt=args["long_prompt"],
        approval_prompt=args["approval_prompt"], client_tool_prompt=args["client_tool_prompt"])
    print(f"think-server check {options.url}", file=out)
    print(f"{'scenario':<13} {'result':<8} {'time':>7}  detail", file=out)

    def row(outcome: Outcome) -> None:
        print(format_row(outcome), file=out, flush=True)

    try:
        outcomes = asyncio.run(run_check(options, args["only"], on_outcome=row))
    except KeyboardInterrupt:
        print("think-server check: interrupted", file=sys.stderr)
        return 130
    failed = [o.name for o in outcomes if o.result == "FAILED"]
    skipped = [o.name for o in outcomes if o.result == "skipped"]
    print(f"{len(outcomes) - len(failed) - len(skipped)} ok, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else "") + f", {len(skipped)} skipped", file=out)
    return 1 if failed else 0


class CheckCommand:
    """``check`` as a ``think-server`` subcommand (see :func:`think_server.app.cli.main`'s ``commands``)."""

    name = "check"

    def add_parser(self, sub: Any) -> None:
        add_parser(sub)

    def run(self, args: dict[str, Any]) -> int:
        return check_main(args)
