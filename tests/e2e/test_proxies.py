"""The README's reverse-proxy snippets, as written, in front of the real server: Debian's nginx and Caddy.

Each snippet is read from README.md ("Behind a reverse proxy") with only its addresses changed (free
loopback ports instead of 80 and 8000, and for Caddy plain HTTP on that port instead of a
certificate). Through each proxy: a browser's chat socket from the page's own origin runs a turn,
the HTTP API takes a submit from it, an event stream arrives as it happens (not in lumps), and a page of
another origin, or a request naming another host (DNS rebinding through the proxy), is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import Client, chat_request, free_port, is_done
from tests.serverproc import ServerProcess

REPO = Path(__file__).resolve().parents[2]
NGINX = Path("/usr/sbin/nginx")
CADDY = Path("/usr/bin/caddy")
PUBLIC = "chat.example.com"
A = "/agents/assistant"


def snippet(language: str) -> str:
    """The README's one ```language block."""
    blocks = re.findall(rf"```{language}\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    assert len(blocks) == 1, f"README.md should hold one {language} block, found {len(blocks)}"
    return str(blocks[0])


def nginx_conf(work: Path, proxy_port: int, server_port: int) -> str:
    site = snippet("nginx")
    assert "listen 80;" in site and "127.0.0.1:8000" in site
    site = site.replace("listen 80;", f"listen 127.0.0.1:{proxy_port};").replace("127.0.0.1:8000",
                                                                                 f"127.0.0.1:{server_port}")
    temp = "\n".join(f"    {kind}_temp_path {work / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi",
                                                                          "scgi"))
    # What /etc/nginx/nginx.conf would wrap the site in, kept in the test's own folder.
    return (f"daemon off;\nworker_processes 1;\npid {work / 'nginx.pid'};\nerror_log {work / 'error.log'};\n"
            f"{'user root;' if os.geteuid() == 0 else ''}\nevents {{}}\n"
            f"http {{\n    access_log off;\n{temp}\n{site}}}\n")


def caddyfile(proxy_port: int, server_port: int) -> str:
    site = snippet("caddy")
    assert site.startswith(f"{PUBLIC} {{") and "127.0.0.1:8000" in site
    # Plain HTTP on a free port (no certificate in a test), no admin endpoint, loopback only.
    site = site.replace(f"{PUBLIC} {{", f"http://{PUBLIC}:{proxy_port} {{", 1).replace("127.0.0.1:8000",
                                                                                       f"127.0.0.1:{server_port}")
    return f"{{\n\tadmin off\n\tauto_https off\n\tdefault_bind 127.0.0.1\n}}\n\n{site}"


@contextlib.contextmanager
def running(command: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[None]:
    with log.open("ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


async def listening(port: int, log: Path) -> None:
    for _ in range(400):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.025)
    raise AssertionError(f"the proxy did not listen: {log.read_text(errors='replace')[-3000:]}")


@contextlib.asynccontextmanager
async def proxied(kind: str, tmp_path: Path) -> AsyncIterator[tuple[ServerProcess, int]]:
    """The server (as the README starts it: THINK_ALLOWED_HOSTS=chat.example.com) behind the proxy."""
    binary = {"nginx": NGINX, "caddy": CADDY}[kind]
    if not binary.exists() and shutil.which(binary.name) is None:
        pytest.fail(f"{binary} is missing: `make proxy-deps` installs Debian's nginx-light and caddy "
                    "(apt-get, as root)")
    server = ServerProcess(app=None, data_dir=tmp_path / "data", log_path=tmp_path / "server.log",
                           env={"THINK_ALLOWED_HOSTS": PUBLIC})
    await server.start()
    port = free_port()
    work = tmp_path / kind
    work.mkdir()
    log = work / "out.log"
    if kind == "nginx":
        conf = work / "nginx.conf"
        conf.write_text(nginx_conf(work, port, server.port))
        command, env = [str(binary), "-c", str(conf), "-p", str(work)], None
    else:
        conf = work / "Caddyfile"
        conf.write_text(caddyfile(port, server.port))
        command = [str(binary), "run", "--config", str(conf), "--adapter", "caddyfile"]
        env = {"XDG_DATA_HOME": str(work / "data"), "XDG_CONFIG_HOME": str(work / "config"), "HOME": str(work)}
    try:
        with running(command, log, env):
            await listening(port, log)
            yield server, port
    finally:
        server.stop()


def page_origin(port: int) -> str:
    return f"http://{PUBLIC}:{port}"


def through(port: int, host: str | None = None, **headers: str) -> httpx.AsyncClient:
    """HTTP to the proxy, as a browser on the public name sends it."""
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                             headers={"host": host or f"{PUBLIC}:{port}", **headers})


async def first_event(lines: AsyncIterator[str], kind: str) -> str:
    async for line in lines:
        if line == f"event: {kind}":
            return line
    raise AssertionError(f"the stream ended before an event {kind!r}")


async def the_page_works_through(port: int) -> None:
    origin = page_origin(port)
    # The chat socket of the page this server serves, on its public origin.
    client = await Client.open(f"ws://{PUBLIC}:{port}{A}/proxied?_pk={uuid.uuid4()}", host="127.0.0.1", port=port,
                               origin=origin)
    rid, frame, _ = chat_request("hi")
    await client.send(frame)
    done = await client.wait_for(is_done(rid), timeout=30)
    assert done.get("outcome") == "completed" and not done.get("error"), done
    await client.close()
    async with through(port, origin=origin) as http:
        # An event stream arrives as it happens: its sync at once, the next turn's events as they come.
        async with http.stream("GET", f"{A}/proxied/events") as events:
            assert events.status_code == 200
            lines = events.aiter_lines()
            await asyncio.wait_for(first_event(lines, "sync"), 10)
            r = await http.post(f"{A}/proxied/submit", json={"input": "hi"})
            assert r.status_code == 202, r.text
            await asyncio.wait_for(first_event(lines, "run-start"), 10)
            await asyncio.wait_for(first_event(lines, "run-end"), 10)
        assert len((await http.get(f"{A}/proxied/get-messages")).json()) == 4


async def a_foreign_page_is_refused_through(port: int) -> None:
    async with through(port, origin="http://evil.example") as http:
        r = await http.post(f"{A}/foreign/submit", json={"input": "hi"})
        assert r.status_code == 403 and "evil.example" in r.json()["error"], r.text
    ws = await connect(f"ws://{PUBLIC}:{port}{A}/foreign?_pk=p", host="127.0.0.1", port=port,
                       origin="http://evil.example")  # type: ignore[arg-type]
    frames = []
    with contextlib.suppress(ConnectionClosed):
        while True:
            frames.append(json.loads(await ws.recv()))
    assert ws.close_code == 4003 and frames and frames[0]["type"] == "cf_agent_error", frames


async def test_nginx_snippet(tmp_path: Path) -> None:
    async with proxied("nginx", tmp_path) as (server, port):
        await the_page_works_through(port)
        await a_foreign_page_is_refused_through(port)
        # A page whose name was made to resolve to the proxy: nginx passes its host on, the server refuses it.
        async with through(port, host=f"evil.example:{port}") as http:
            r = await http.post(f"{A}/rebound/submit", json={"input": "hi"})
            assert r.status_code == 421 and "evil.example" in r.json()["error"], r.text
        assert not list((server.data_dir / "agents").glob("*/rebound*")), "a refused request made an instance"


async def test_caddy_snippet(tmp_path: Path) -> None:
    async with proxied("caddy", tmp_path) as (server, port):
        await the_page_works_through(port)
        await a_foreign_page_is_refused_through(port)
        # Caddy serves only the site's host: another never reaches the server.
        async with through(port, host=f"evil.example:{port}") as http:
            r = await http.post(f"{A}/rebound/submit", json={"input": "hi"})
            assert r.status_code != 202 and "operation_id" not in r.text, r.text
        assert not list((server.data_dir / "agents").glob("*/rebound*"))
