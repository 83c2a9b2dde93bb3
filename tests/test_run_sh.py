"""``tests/run.sh``'s lock (two runs on one machine take turns): held for the whole run, by the
run alone, so that what a killed run leaves behind (a server, a forked child) never keeps it.
Each test runs ``tests/run.sh`` on a one-test file of its own, with a lock file of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

#: The test the inner run runs: children that outlive it, as a test's servers do when the run is
#: killed (one forked and exec'd on a terminal, as tests/test_commands.py's read_pty, one started
#: with its descriptors kept), their pids in PIDS, then it waits to be killed.
INNER_TEST = """
import os, pty, subprocess, sys, time

def test_hold():
    pid, _ = pty.fork()
    if pid == 0:
        os.execv("/bin/sleep", ["sleep", "300"])
    kept = subprocess.Popen(["sleep", "300"], close_fds=False)
    with open(os.environ["PIDS"] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {pid} {kept.pid}")
    os.rename(os.environ["PIDS"] + ".tmp", os.environ["PIDS"])
    time.sleep(300)
"""


def lock_free(lock: Path) -> bool:
    return subprocess.run(["flock", "-n", str(lock), "true"]).returncode == 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"  # not a zombie


def wait_until(check, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def inner_run(tmp_path):
    """``start() -> (run.sh process, pytest pid, [pids of the children left behind])``, once
    the inner test holds its children; every process is killed at the end."""
    (tmp_path / "test_hold.py").write_text(INNER_TEST)
    lock, pids = tmp_path / "lock", tmp_path / "pids"
    started: list[int] = []
    procs: list[subprocess.Popen] = []

    def start() -> tuple[subprocess.Popen, int, list[int]]:
        env = {**os.environ, "CRAWLER_TESTS_LOCK": str(lock), "PIDS": str(pids), "TEST_WORKERS": "0"}
        args = [
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            str(tmp_path / "test_hold.py"),
        ]
        proc = subprocess.Popen(
            ["bash", str(ROOT / "tests/run.sh"), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        procs.append(proc)
        if not wait_until(pids.exists, 120):
            proc.kill()
            raise AssertionError(
                f"the inner run did not start its test:\n{proc.communicate()[0].decode(errors='replace')[-3000:]}"
            )
        pytest_pid, *children = map(int, pids.read_text().split())
        started.extend([pytest_pid, *children])
        return proc, pytest_pid, children

    yield start, lock
    for pid in started:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def test_a_killed_runs_children_do_not_keep_the_lock(inner_run):
    start, lock = inner_run
    proc, pytest_pid, children = start()
    assert not lock_free(lock)  # held while the run runs
    os.kill(pytest_pid, signal.SIGKILL)
    proc.wait(30)
    assert all(alive(pid) for pid in children)  # left behind, as a killed run's servers are...
    assert wait_until(lambda: lock_free(lock), 10)  # ...and the next run may start


def test_a_run_whose_shell_is_killed_stops_and_frees_the_lock(inner_run):
    start, lock = inner_run
    proc, pytest_pid, _ = start()
    proc.send_signal(signal.SIGKILL)  # the shell alone: kill -9 <run.sh>
    proc.wait(30)
    assert wait_until(lambda: not alive(pytest_pid), 10)  # no run goes on without the lock
    assert lock_free(lock)
