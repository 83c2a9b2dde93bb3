"""deploy/ built and run, not only parsed: ``deploy/smoke.sh`` builds the worker image from
deploy/Dockerfile with podman (no Docker Hub: a Debian base made by mmdebstrap), runs
deploy/compose.yaml with deploy/compose.podman.yaml (Redis, MariaDB, two scrapyd workers,
Prometheus), crawls a part of the Python docs and checks MariaDB, scrapyd and Prometheus.

Skipped where podman cannot start a container (not root, podman missing, a kernel or sandbox
that refuses it). The first run on a machine builds the images (a few minutes); later runs
take about a minute (the images are kept by podman as a cache)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.oracle import reachable_pages
from tests.servers import DOCS

SCRIPT = ROOT / "deploy" / "smoke.sh"
CONTAINERS_CONF = ROOT / "deploy" / "podman" / "containers.conf"
#: The script's default site: the docs' c-api/ directory alone.
SUBTREE = "c-api"
#: What the script copies into a broken copy of the repository.
PROJECT_FILES = (
    "deploy",
    "crawler",
    "scrapy_frontier",
    "setup.py",
    "pyproject.toml",
    "README.md",
    "scrapy.cfg",
    "requirements.txt",
    "tests/oracle.py",
)
FAILURE = re.compile(r"^deploy/smoke\.sh: failed at step '([a-z ]+)': (.+) \(log: (\S+)\)$")


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman_unusable() -> str | None:
    """Why podman cannot start a container here, or None: a trivial container (the host's root
    file system as an overlay, so nothing is written to it, and no image is needed) is run."""
    if os.geteuid() != 0:
        return "deploy/smoke.sh needs root (rootful podman, apt-get)"
    if not shutil.which("podman"):
        return "podman is not installed (tests/run.sh installs it: apt-get install podman runc netavark iptables)"
    try:
        probe = subprocess.run(
            ["podman", "run", "--rm", "--network", "none", "--rootfs", "/:O", "/bin/true"],
            env=podman_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        return "podman run of a trivial container did not end in 120 s"
    if probe.returncode != 0:
        lines = [line for line in probe.stderr.splitlines() if line.strip()]
        return f"podman cannot start a container here: {lines[-1] if lines else f'exit status {probe.returncode}'}"
    return None


@pytest.fixture(scope="module")
def podman():
    reason = podman_unusable()
    if reason:
        pytest.skip(reason)


def project_of(log: Path) -> str:
    """The compose project (crawler-smoke-<pid>) a run made, from its log."""
    m = re.search(r"^\S+ cleanup of project (crawler-smoke-\d+)$", log.read_text(errors="replace"), re.M)
    assert m, f"no project in {log}"
    return m.group(1)


def leftovers(project: str) -> list[str]:
    """What is left of ``project``: containers, pods, volumes, networks (runs of other tests
    may have their own meanwhile)."""
    found = []
    for what in (["ps", "-a"], ["pod", "ps"], ["volume", "ls"], ["network", "ls"]):
        names = "{{.Names}}" if what[0] == "ps" else "{{.Name}}"
        done = subprocess.run(
            ["podman", *what, "--format", names], env=podman_env(), capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        found += [
            f"{what[0]} {name}" for name in done.stdout.split() if name.startswith((project + "_", "pod_" + project))
        ]
    return found


def copy_repository(repo: Path) -> None:
    for name in PROJECT_FILES:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, repo / name)


def run_script(script: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """The script in a subprocess; past ``timeout`` it gets SIGTERM (its trap removes the stack)
    before the test fails."""
    # The script chooses its own ports and names; nothing from the test's environment leaks in.
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "MYSQL_URL", "CONTAINERS_CONF", "PYTHONPATH")}
    cmd = ["bash", str(script), *args]
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                stdout, stderr = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
            pytest.fail(f"{script} did not end in {timeout:.0f} s: {stderr.strip()}")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def figures(stdout: str) -> dict[str, dict[str, str]]:
    """``smoke: WHAT k=v k=v`` lines -> ``{WHAT: {k: v}}``."""
    found = {}
    for line in stdout.splitlines():
        m = re.match(r"smoke: (\w+) (.*)", line)
        if m:
            found[m.group(1)] = dict(re.findall(r"(\w+)=(\S+)", m.group(2)))
    return found


@pytest.mark.slow
def test_the_image_built_a_compose_crawl_stored_and_prometheus_scraped(podman, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(DOCS / SUBTREE, site / SUBTREE)
    expected = reachable_pages(site, f"{SUBTREE}/index.html")
    assert len(expected) == 64

    # First run on a machine: mmdebstrap and four image builds, a few minutes.
    done = run_script(SCRIPT, "--workdir", str(tmp_path / "smoke"), timeout=1500)
    log = tmp_path / "smoke" / "smoke.log"
    assert done.returncode == 0, done.stderr + "\n" + (log.read_text(errors="replace")[-5000:] if log.exists() else "")
    assert done.stderr == ""
    print(done.stdout)
    got = figures(done.stdout)
    assert done.stdout.splitlines()[-1] == "smoke: ok"
    assert got["pages"] == {
        "expected": str(len(expected)),
        "stored": str(len(expected)),
        "duplicates": "0",
        "missing": "0",
        "extra": "0",
    }
    assert got["jobs"]["finished"] == "2"
    assert sum(int(n) for n in got["jobs"]["items"].split(",")) == len(expected)
    assert got["prometheus"]["up"] == "worker1:9410,worker2:9410"
    assert int(got["prometheus"]["crawler_pages_total"]) > 0
    # Prometheus 2.42 (Debian's) loaded every rule of deploy/alerts.yml.
    alerts = yaml.safe_load((ROOT / "deploy" / "alerts.yml").read_text())
    assert int(got["prometheus"]["alert_rules"]) == sum(len(g["rules"]) for g in alerts["groups"]) > 0
    assert float(got["seconds"]["total"]) > 0
    # The stored pages are the expected ones (the script compared the URLs; check its lists).
    stored = (tmp_path / "smoke" / "stored.txt").read_text().split()
    assert sorted(stored) == sorted(f"http://docs:8000/{p}" for p in expected)
    assert leftovers(project_of(log)) == []


@pytest.mark.slow
def test_a_broken_build_fails_with_one_line_naming_the_step_and_leaves_nothing(podman, tmp_path):
    """A copy of the repository whose Dockerfile copies a file that does not exist: the build
    step fails, in one line that names it and the log."""
    repo = tmp_path / "repo"
    copy_repository(repo)
    dockerfile = repo / "deploy" / "Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text().replace("COPY requirements.txt ./", "COPY requirements-missing.txt ./")
    )

    done = run_script(repo / "deploy" / "smoke.sh", timeout=1500)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    m = FAILURE.match(lines[0])
    assert m, lines[0]
    assert m.group(1) == "build", lines[0]
    assert "requirements-missing.txt" in m.group(2), lines[0]
    log = Path(m.group(3))
    assert log.is_file()
    # It failed before any container of the stack was made.
    assert "cleanup of project" not in log.read_text(errors="replace")
    shutil.rmtree(log.parent)


@pytest.mark.slow
def test_a_failed_start_removes_the_containers_and_the_network(podman, tmp_path):
    """An override naming an image that does not exist: podman-compose has created the network and
    some containers when it fails; the script removes them all."""
    repo = tmp_path / "repo"
    copy_repository(repo)
    override = repo / "deploy" / "compose.podman.yaml"
    override.write_text(
        override.read_text().replace(
            "localhost/crawler-smoke-prometheus:bookworm", "localhost/crawler-smoke-missing:none"
        )
    )

    done = run_script(repo / "deploy" / "smoke.sh", "--workdir", str(tmp_path / "smoke"), timeout=1500)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and done.stdout == "", done.stdout + done.stderr
    m = FAILURE.match(lines[0])
    assert m and m.group(1) == "start", lines[0]
    assert "crawler-smoke-missing" in m.group(2), lines[0]
    # Containers had been made (the log shows them removed) ...
    log = tmp_path / "smoke" / "smoke.log"
    project = project_of(log)
    assert f"podman logs {project}_redis_1" in log.read_text(errors="replace")
    # ... and none is left, nor the network or volumes.
    assert leftovers(project) == []


def test_a_bad_option_fails_with_one_line():
    done = subprocess.run(["bash", str(SCRIPT), "--frobnicate"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == "deploy/smoke.sh: failed at step 'options': unknown option --frobnicate (see --help)\n"
