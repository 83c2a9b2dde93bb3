"""``scrapy requeue`` and ``scrapy replay`` against the real Redis, with bad records."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.conftest import scrapy_command as run

GOOD_PAGE = {
    "url": "http://h/2",
    "status": 200,
    "content_hash": "a" * 64,
    "fetched_at": "2026-01-01T00:00:00+00:00",
    "title": "ok",
}


def test_requeue_moves_requests_and_keeps_what_is_not_a_request(redis_url, redis_client):
    bad = [
        b'{"request": {"url": "http://h/a", "meta": "notadict"}}',
        b'{"request": {"url": 5}}',
        b'{"request": {"url": "http://h/b", "priority": "high"}}',
        b'{"request": {"url": "ftp://h/c"}}',
        b"not json",
    ]
    good = json.dumps(
        {
            "reason": "retries_exhausted",
            "request": {"url": "http://h/ok", "meta": {"retry_times": 2, "depth": 3}, "priority": 4},
        }
    )
    redis_client.lpush("site:requests:failed", *bad, good)
    done = run(["requeue", "site", "--json"], {"REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"requeued": 1, "unreadable": 5, "left": 5}
    assert redis_client.zrange("site:requests:h", 0, -1, withscores=True) == [(b"-4", -4)]  # its priority
    queued = redis_client.lrange("site:requests:h#-4", 0, -1)
    assert len(queued) == 1
    assert json.loads(queued[0])["meta"] == {"depth": 3}  # fresh retries
    assert redis_client.zscore("site:requests", "h") is not None
    assert run(["requeue", "site", "--limit", "-1"], {"REDIS_URL": redis_url}).returncode != 0


def test_replay_refuses_unknown_classes_and_broken_records_without_running_them(redis_url, redis_client, tmp_path):
    marker = tmp_path / "pwned"
    records = [
        json.dumps({"item_class": "os.system", "item": {"command": f"touch {marker}"}}),
        "[" * 100_000 + "]" * 100_000,
        json.dumps({"item_class": "crawler.items.Page", "item": {**GOOD_PAGE, "url": "http://h/1", "title": "\ud800"}}),
        json.dumps({"item_class": "crawler.items.Page", "item": {**GOOD_PAGE, "depth": "deep"}}),
        json.dumps({"item_class": "crawler.items.Page", "item": GOOD_PAGE}),
    ]
    redis_client.lpush("site:items:pending", *records)
    db = tmp_path / "r.sqlite3"
    done = run(["replay", "site", "--json", "-s", f"SQLITE_PATH={db}"], {"REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"written": 1, "refused": 4, "left": 0}
    assert not marker.exists()
    assert [r[0] for r in sqlite3.connect(db).execute("SELECT url FROM pages")] == ["http://h/2"]
    invalid = [json.loads(r) for r in redis_client.lrange("site:items:invalid", 0, -1)]
    assert len(invalid) == 4 and {r["reason"] for r in invalid} == {"unreplayable"}
    assert not list(redis_client.scan_iter(match="site:items:pending:*"))


def test_replay_setup_errors_are_one_line(redis_url):
    done = run(["replay", "site"], {"REDIS_URL": redis_url, "MYSQL_URL": "postgres://u:s3cretpw@h/db"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: MYSQL_URL postgres://u:***@h/db must start with mysql://, mariadb:// or mysql+pymysql://"
    ]
    assert done.stdout == ""
    done = run(["requeue", "site"], {"REDIS_URL": "redis://127.0.0.1:1/0?password=s3cretpw"})
    assert done.returncode == 2 and "s3cretpw" not in done.stderr and "Traceback" not in done.stderr


def test_push_checks_payloads_like_a_worker(redis_url, redis_client):
    done = run(
        [
            "push",
            "site",
            "http://a.example/",
            "not a url",
            '{"url": "ftp://x"}',
            '{"url": "http://b.example/", "meta": {"depth": "x"}}',
            "--json",
        ],
        {"REDIS_URL": redis_url},
    )
    assert done.returncode == 1  # some refused
    result = json.loads(done.stdout)
    assert result["pushed"] == 1
    assert [r["reason"] for r in result["refused"]] == ["bad_url", "bad_scheme", "bad_field"]
    assert redis_client.lrange("site:start_urls", 0, -1) == [b"http://a.example/"]
    assert run(["push", "nosuch", "http://x/"], {"REDIS_URL": redis_url}).returncode == 2


@pytest.mark.slow
def test_status_during_and_after_a_two_worker_crawl(
    docs_site, start_workers, redis_url, redis_client, mysql_url, mysql_query
):
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    settings = {
        "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
        "SCHEDULER_PERSIST": "True",
        "CONCURRENT_REQUESTS": "4",
        "DOWNLOAD_DELAY": "0.02",
    }
    workers = start_workers(2, settings=settings, env=env)
    redis_client.lpush("site:start_urls", f"{docs_site.url}index.html")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        during = json.loads(run(["status", "site", "--json"], {"REDIS_URL": redis_url}).stdout)
        if during["pages"] >= 20:
            break
        time.sleep(1)
    assert len(during["workers"]) == 2 and not during["idle"]
    assert during["frontier"]["queued"] + during["frontier"]["in_flight"] > 0
    for w in workers:
        assert w.wait() == 0
    after = json.loads(run(["status", "site", "--json"], {"REDIS_URL": redis_url}).stdout)
    assert after["idle"] and after["workers"] == [] and after["frontier"]["in_flight"] == 0
    assert (
        after["dupefilter_size"]
        == int(redis_client.get("site:dupefilter:count"))
        >= mysql_query("SELECT COUNT(*) FROM pages")[0][0]
        == 526
    )
    text = run(["status", "site"], {"REDIS_URL": redis_url}).stdout
    assert text.startswith("crawl 'site': idle")
    listing = json.loads(run(["status", "--json"], {"REDIS_URL": redis_url}).stdout)["crawls"]
    site = [c for c in listing if c["crawl"] == "site"]
    assert site == [
        {
            "crawl": "site",
            "spider": "site",
            "crawl_id": None,
            "idle": True,
            "state": "idle",
            "hosts": 0,
            "start_urls_waiting": 0,
            "in_flight": 0,
            "workers": 0,
            "seen": after["dupefilter_size"],
            "requests_failed": 0,
        }
    ]
    assert "site: idle, 0 workers" in run(["status"], {"REDIS_URL": redis_url}).stdout


#: Where a password sits in the URLs the tests try, ``{p}`` as written (not percent-encoded).
URL_SHAPES = [
    "redis://:{p}@127.0.0.1:6379/0",
    "redis://user:{p}@127.0.0.1:6379/0",
    "redis://{p}@127.0.0.1:6379/0",  # redis-cli's lone userinfo: a password
    "rediss://127.0.0.1:6379/0?password={p}",
    "redis://127.0.0.1:6379/0?db=0&password={p}&socket_timeout=5",
    "redis://127.0.0.1:6379/0?auth_token={p}",
    "redis+sentinel://user:{p}@127.0.0.1:26379,127.0.0.2:26379/mymaster/0",
    "unix://:{p}@/tmp/redis.sock?db=0",
    "mysql://crawler:{p}@127.0.0.1:3306/crawl",
]


@pytest.mark.parametrize("char", list("#/?@:[]%&= "))
def test_redact_url_never_shows_a_password_whatever_the_urls_shape(char):
    from urllib.parse import quote

    from scrapy_frontier.connection import redact_url

    password = f"QQ1{char}ZZ2"
    for shape in URL_SHAPES:
        if char == ":" and shape.startswith("redis://{p}@"):
            continue  # redis://QQ1:ZZ2@host is the user QQ1 with the password ZZ2
        shown = redact_url(shape.format(p=password))
        assert "QQ1" not in shown and "ZZ2" not in shown, (shape, shown)
        # percent-encoded, the URL is shown whole but for the password
        encoded = redact_url(shape.format(p=quote(password, safe="")))
        assert "QQ1" not in encoded and "ZZ2" not in encoded, (shape, encoded)
        assert "127.0.0.1" in encoded or "/tmp/redis.sock" in encoded, (shape, encoded)
    assert redact_url(f"redis://default:{quote(password, safe='')}@h:1/0") == "redis://default:***@h:1/0"


def test_redact_url_shows_a_malformed_url_that_has_no_userinfo():
    from scrapy_frontier.connection import redact_url

    assert redact_url("http://[::1") == "http://[::1"  # an IP v6 literal left open: nothing to hide
    assert redact_url("redis://[::1/0") == "redis://[::1/0"
    assert redact_url("redis://:s3cret") == "redis://***"  # a password without its host
    assert redact_url("http://u:s3cret@[::1") == "http://***"


@pytest.mark.parametrize(
    ("setting", "url"),
    [
        ("REDIS_URL", "redis://:QQ1#ss@w/rdZZ2@127.0.0.1:{port}/0"),  # the shape
        ("REDIS_URL", "redis://:QQ1/ZZ2@127.0.0.1:{port}/0"),
        ("REDIS_URL", "redis://:QQ1?ZZ2@127.0.0.1:{port}/0"),
        ("REDIS_URL", "redis://user:QQ1@#ZZ2@127.0.0.1:{port}/0"),
        ("REDIS_URL", "redis://:QQ1[ZZ2@127.0.0.1:{port}/0"),
        ("REDIS_URL", "redis://127.0.0.1:{port}/0?password=QQ1#ZZ2"),
        ("REDIS_URL", "redis://127.0.0.1:{port}/0?password=QQ1&ZZ2"),
        ("REDIS_URL", "redis+sentinel://:QQ1#ZZ2@127.0.0.1:{port},127.0.0.1:1/mymaster/0"),
        ("REDIS_URL", "redis+sentinel://user:QQ1/ZZ2@127.0.0.1:{port}/mymaster"),
        ("MYSQL_URL", "mysql://crawler:QQ1#ZZ2@127.0.0.1:3306/crawl"),
        ("MYSQL_URL", "mysql://crawler:QQ1/ZZ2@127.0.0.1:3306/crawl"),
        ("MYSQL_URL", "mysql://crawler:QQ1?ZZ2@127.0.0.1:3306/crawl"),
    ],
)
def test_a_password_that_is_not_percent_encoded_is_refused_and_never_printed(setting, url, redis_url):
    env = {"REDIS_URL": redis_url}
    env[setting] = url.format(port=redis_url.rsplit(":", 1)[1].split("/")[0])
    done = run(["replay", "site"], env)  # reads both URLs
    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.strip()], done.stderr  # one line
    assert done.stderr.startswith(f"error: {setting} ") and "percent-encode the password" in done.stderr
    assert "QQ1" not in done.stderr + done.stdout and "ZZ2" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    "url",
    [
        "redis://us:QQ1@ZZ2@127.0.0.1:1/0",  # an '@' of the password in the userinfo: parsed right
        "redis://:QQ1:ZZ2@127.0.0.1:1/0",
        "redis://127.0.0.1:1/0?password=QQ1ZZ2&db=0",
        "redis+sentinel://:QQ1ZZ2@127.0.0.1:1/mymaster",
    ],
)
def test_an_unreachable_redis_is_named_without_its_password(url):
    done = run(["status", "site"], {"REDIS_URL": url})
    assert done.returncode == 2 and done.stderr.startswith("error: REDIS_URL redis"), done.stderr
    assert "QQ1" not in done.stderr and "ZZ2" not in done.stderr and "Traceback" not in done.stderr


def test_the_documented_redis_cli_recipes_work_on_a_password_protected_redis(throwaway_redis, start_worker):
    """README's REDIS_URL and its ``redis-cli -u "$REDIS_URL"`` lines, and operating.md's two
    recipes, run as written (host and port replaced) against ``redis-server --requirepass`` with
    the installed redis-cli; the workers and commands take the same URL and never print it whole."""
    from urllib.parse import quote

    import redis

    password = "p#ss@w/rd"  # operating.md's example
    server = throwaway_redis(requirepass=password)
    where = f"127.0.0.1:{server.port}"
    readme = (ROOT / "README.md").read_text().splitlines()
    export = next(line for line in readme if line.startswith("export REDIS_URL="))
    url = (
        export.split("=", 1)[1]
        .split()[0]
        .replace("password", quote(password, safe=""))
        .replace("redis-host:6379", where)
    )
    env = {"PATH": "/usr/bin:/bin", "REDIS_URL": url}

    from scrapy_frontier.connection import redact_url

    worker = start_worker(settings={"MAX_IDLE_TIME_BEFORE_CLOSE": "1"}, env={"REDIS_URL": url})  # before any start URL
    assert worker.wait(60) == 0, worker.output[-3000:]
    assert f"on {redact_url(url)}" in worker.output and ":***@" in redact_url(url)
    feeds = [line for line in readme if line.startswith('redis-cli -u "$REDIS_URL"')]
    assert len(feeds) == 2
    for line in feeds:
        subprocess.run(["bash", "-c", line], env=env, check=True, capture_output=True, timeout=30)
    operating = (ROOT / "docs/operating.md").read_text()
    recipe = operating.split("**redis-cli.**", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert password in recipe and quote(password, safe="") in recipe
    subprocess.run(
        [
            "bash",
            "-ec",
            recipe.replace("redis-host:6379", where).replace("-h redis-host -p 6379", f"-h 127.0.0.1 -p {server.port}"),
        ],
        env={"PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        timeout=30,
    )
    client = redis.Redis(port=server.port, password=password)
    assert len(client.lrange("site:start_urls", 0, -1)) == 4  # README's two, operating.md's two
    client.close()

    for command in (["push", "site", "https://example.com/more"], ["status", "site"]):
        done = run(command, env)
        assert done.returncode == 0, done.stderr
        assert "p#ss" not in done.stdout + done.stderr and quote(password, safe="") not in done.stdout + done.stderr
    assert "p#ss" not in worker.output and quote(password, safe="") not in worker.output


def read_pty(argv: list[str], env: dict[str, str], enough, timeout: float = 60) -> bytes:
    """Run ``python -m scrapy argv`` on a pseudo-terminal until ``enough(output)`` is true (or
    ``timeout`` seconds pass), then Ctrl-C (SIGINT); returns what it wrote. Exit status 0 is
    asserted. Waiting for the output, not for a fixed time, keeps a loaded machine's slow start
    from failing the test."""
    import os
    import pty
    import select
    import signal

    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once (nothing of pytest runs here)
        os.chdir(ROOT)
        os.execve(
            sys.executable,
            [sys.executable, "-m", "scrapy", *argv],
            {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TERM": "xterm", **env},
        )
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not enough(out):
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    out += os.read(fd, 65536)
                except OSError:
                    break
    finally:
        os.kill(pid, signal.SIGINT)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, out[-2000:]
    return out


def test_status_watch_redraws_on_a_terminal_and_appends_elsewhere(redis_url, redis_client):
    redis_client.hset("site:stats", "pages", 3)
    redis_client.lpush("site:start_urls", "http://a.example/")
    env = {"REDIS_URL": redis_url}
    screen = read_pty(["status", "site", "--watch", "0.3"], env, lambda out: out.count(b"\x1b[J") >= 3)
    frames = screen.split(b"\x1b[H")[1:]  # cursor home starts each frame
    assert len(frames) >= 3 and screen.startswith(b"\x1b[H"), screen[:500]
    for frame in frames[:2]:  # the whole frames (the last may be cut by Ctrl-C)
        assert frame.startswith(b"every 0.3s: scrapy status site"), frame
        assert b"  progress: 3 pages done, 1 to go (75%)" in frame
        assert b"1 start URL waiting" in frame and b"\x1b[J" in frame  # the rest of the screen cleared

    # a pipe: the same text appended, no terminal codes
    frame_text = (
        "crawl 'site': stalled (work is left and no worker is alive: start one to go on)\n"
        "  progress: 3 pages done, 1 to go (75%)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "scrapy", "status", "site", "--watch", "0.3"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        text=True,
    )
    piped, deadline = "", time.monotonic() + 60
    while piped.count(frame_text) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        piped += line
    proc.send_signal(2)
    rest, _ = proc.communicate(timeout=30)
    piped += rest
    assert proc.returncode == 0 and "\x1b" not in piped and piped.count(frame_text) >= 2, piped
    # --json, even on a terminal: one object per line, as in a pipe
    lines = (
        read_pty(["status", "site", "--watch", "0.3", "--json"], env, lambda out: out.count(b"\n") >= 3)
        .decode()
        .splitlines()
    )
    assert len(lines) >= 2 and all(json.loads(line)["frontier"]["start_urls_waiting"] == 1 for line in lines[:2])


def test_status_names_the_crawl_with_its_crawl_id_and_a_crawl_no_worker_moves_is_stalled(redis_url, redis_client):
    env = {"REDIS_URL": redis_url}
    assert run(["push", "site", "-s", "CRAWL_ID=june", "http://a.example/"], env).returncode == 0
    text = run(["status", "site", "-s", "CRAWL_ID=june"], env).stdout
    assert text.startswith("crawl 'site@june': stalled (work is left and no worker is alive"), text
    status = json.loads(run(["status", "site", "-s", "CRAWL_ID=june", "--json"], env).stdout)
    assert status["crawl"] == "site@june" and status["state"] == "stalled" and not status["workers"]
    assert run(["status", "site"], env).stdout.startswith("crawl 'site': idle")  # the other crawl of the spider


def test_command_output_says_one_thing_not_one_things(redis_url, redis_client):
    env = {"REDIS_URL": redis_url}
    assert run(["push", "site", "http://a.example/"], env).stdout == "pushed 1 payload, refused 0\n"
    status = run(["status", "site"], env).stdout
    assert "1 start URL waiting" in status and "0 pages done" in status
    redis_client.sadd("scrapy-frontier:crawls", "site")  # as a worker records it
    # work left, no worker alive: stalled, not running
    assert "site: stalled, 0 workers, 0 hosts queued, 0 in flight, 1 start URL waiting" in run(["status"], env).stdout
    redis_client.lpush("site:requests:failed", b"not json", json.dumps({"request": {"url": "http://h/ok"}}))
    assert (
        run(["requeue", "site"], env).stdout
        == "requeued 1 request; 1 left in the dead-letter list (1 record that is not a request, left there)\n"
    )


@pytest.mark.parametrize(
    "command",
    [
        "status site | true",
        "status site --json | true",
        "status | true",
        "status site --watch 0.1 | head -1",
        "push site http://a.example/ | true",
    ],
)
def test_a_reader_that_stops_early_ends_the_command_quietly(command, redis_url, redis_client):
    redis_client.sadd("scrapy-frontier:crawls", "site")
    done = subprocess.run(
        ["bash", "-c", f'"$PYTHON" -m scrapy {command}; echo "status ${{PIPESTATUS[0]}}" >&2'],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "PYTHON": sys.executable, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stderr == "status 0\n"  # no BrokenPipeError, no traceback


def test_push_refuses_a_spider_the_project_lacks_with_one_line(redis_url, redis_client):
    done = run(["push", "nosuch", "http://x/"], {"REDIS_URL": redis_url})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == ["error: this project has no spider 'nosuch' (its spiders: modules, site)"]
    assert not redis_client.exists("nosuch:start_urls")


def test_a_refused_payload_is_shown_escaped(redis_url):
    import os

    raw = b"http://a.example/\xff\x1b[2J\x07" + b"x" * 300
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scrapy",
            "push",
            "site",
            os.fsdecode(raw),
            '{"url": "http://b.example/", "\\u001b[2J": 1}',
        ],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url},
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 1
    out = done.stdout + done.stderr
    assert b"\x1b" not in out and b"\xff" not in out and b"\x07" not in out and "\ufffd".encode() not in out
    first = done.stdout.decode().splitlines()[0]
    assert (
        first.startswith(r"refused b'http://a.example/\xff\x1b[2J\x07xxx") and "... (323 bytes) (not_utf8)" in first
    ), first
    assert r"unknown keys '\x1b[2J' will be ignored" in done.stderr.decode()
    as_json = subprocess.run(
        [sys.executable, "-m", "scrapy", "push", "site", os.fsdecode(raw), "--json"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url},
        capture_output=True,
        timeout=60,
    )
    assert json.loads(as_json.stdout)["refused"][0]["payload"].startswith("http://a.example/\\xff\x1b[2J")


def test_a_refused_payload_never_shows_a_password(redis_url):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url}
    payload = '{"url": "https://ann:p@ss:w0rd@a.example/x", "meta": {"next": "https://bob:hunter2@b.example/"}}'
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", "push", "site", payload], cwd=ROOT, env=env, capture_output=True, timeout=60
    )
    as_json = subprocess.run(
        [sys.executable, "-m", "scrapy", "push", "site", payload, "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == as_json.returncode == 1
    for out in (done.stdout + done.stderr, as_json.stdout + as_json.stderr):
        assert b"w0rd" not in out and b"hunter2" not in out, out
    assert "https://ann:***@a.example/x" in done.stdout.decode() and "(bad_url)" in done.stdout.decode()
    assert (
        json.loads(as_json.stdout)["refused"][0]["payload"]
        == '{"url": "https://ann:***@a.example/x", "meta": {"next": "https://bob:***@b.example/"}}'
    )


def test_hide_passwords_hides_every_password_and_only_passwords():
    from scrapy_frontier.wording import hide_passwords, shown_payload

    assert (
        hide_passwords(b"http://u:p@h/ and ftp://v:q%40r@g:21/?a=b@c") == b"http://u:***@h/ and ftp://v:***@g:21/?a=b@c"
    )
    assert hide_passwords(b"https://token@h/ https://h/@x mailto:a@b") == b"https://token@h/ https://h/@x mailto:a@b"
    # hidden before the cut: a limit inside the password does not show its start
    assert "secret" not in shown_payload(b"http://u:secret@h/" + b"x" * 300, limit=12)


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("[", "the '[' at position 0 has no closing ']'"),
        ("https://h/[!]*", "has no closing ']'"),
        ("https://h/[z-a]*", "the range z-a is empty"),
        ("", "it is empty"),
    ],
)
def test_forget_refuses_a_malformed_pattern(pattern, problem, redis_url):
    done = run(["forget", "site", "--pattern", pattern], {"REDIS_URL": redis_url})
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr.startswith(f"error: --pattern {pattern!r} is malformed: ")
        and problem in done.stderr
        and len(done.stderr.splitlines()) == 1
    ), done.stderr


def test_push_of_a_missing_file_is_one_line(redis_url, tmp_path):
    done = run(["push", "site", "--file", str(tmp_path / "nonexistent")], {"REDIS_URL": redis_url})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"error: --file {tmp_path / 'nonexistent'}: No such file or directory"], (
        done.stderr
    )


def test_push_refuses_a_deeply_nested_payload_as_a_worker_does(redis_url, redis_client, tmp_path):
    deep = '{"url": "http://h/", "meta": {"x": ' + "[" * 30_000 + "]" * 30_000 + "}}"
    payloads = tmp_path / "payloads"
    payloads.write_text(deep + "\nhttp://a.example/\n")
    done = run(["push", "site", "--file", str(payloads), "--json"], {"REDIS_URL": redis_url})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["pushed"] == 1 and [r["reason"] for r in result["refused"]] == ["bad_payload"]
    assert redis_client.lrange("site:start_urls", 0, -1) == [b"http://a.example/"]


@pytest.mark.parametrize("command", ["status site", "status site --json", "push site http://a.example/"])
def test_output_to_a_full_device_is_one_line(command, redis_url, redis_client):
    done = subprocess.run(
        ["bash", "-c", f'"$PYTHON" -m scrapy {command} > /dev/full'],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "PYTHON": sys.executable, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.splitlines() == ["error: cannot write the output: No space left on device"], done.stderr


@pytest.mark.parametrize("seconds", ["0", "-1", "nan"])
def test_status_watch_needs_a_positive_number(seconds, redis_url):
    done = run(["status", "site", "--watch", seconds], {"REDIS_URL": redis_url})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == ["error: --watch needs a positive number of seconds"], done.stderr


def test_status_shows_the_busy_hosts_and_what_holds_each_back(redis_url, redis_client):
    """The hosts with the most requests in flight across the crawl (the frontier's in-flight
    counts), each with its delay between sends, its last latency and what holds it back: a pause,
    the rate rule that sets its delay (here a rate, a Crawl-delay), a slow-down, the concurrency
    cap. Read from the politeness hashes the workers keep, as the Lua policy reads them; a live rate
    that is not a number is ignored, as the scripts ignore it."""
    now_ms = int(redis_client.time()[0] * 1000)
    redis_client.hset("site:politeness:@inflight", mapping={"@": "x" * 80, "a.example": 8, "b.example": 2, "c": 1})
    redis_client.hset("site:politeness:@at_delay", mapping={"a.example": 250_000, "b.example": 100_000})
    redis_client.hset("site:politeness:@latency", mapping={"a.example": 1_000_000, "b.example": -1 - 3_000_000})
    redis_client.hset("site:politeness:b.example", mapping={"robots_delay": 2, "factor": 0.5})
    redis_client.hset("site:politeness:c", mapping={"pause_until": now_ms + 60_000})
    redis_client.hset("site:rates", mapping={"b.example": 10, "c": "abc"})
    # nothing in flight: d is listed for its pause (its robots.txt unreachable), e (a Crawl-delay) is not
    redis_client.hset("site:politeness:d", mapping={"pause_until": now_ms + 60_000})
    redis_client.hset("site:politeness:e", mapping={"robots_delay": 5})
    redis_client.sadd("site:politeness:@limited", "d", "e", "b.example")
    env = {"REDIS_URL": redis_url}
    status = json.loads(run(["status", "site", "--json", "-s", "DOMAIN_RATE_LIMIT=2"], env).stdout)
    assert status["busy_hosts"] == [
        {
            "host": "a.example",
            "in_flight": 8,
            "delay_s": 0.5,
            "latency_s": 1.0,
            "held_back_by": ["rate", "concurrency cap"],
        },
        {
            "host": "b.example",
            "in_flight": 2,
            "delay_s": 4.0,
            "latency_s": 3.0,
            "held_back_by": ["Crawl-delay", "slowed down"],
        },
        {
            "host": "c",
            "in_flight": 1,
            "delay_s": 0.5,
            "latency_s": None,
            "held_back_by": ["paused", "rate", "bad live rate ignored"],
        },
        {"host": "d", "in_flight": 0, "delay_s": 0.5, "latency_s": None, "held_back_by": ["paused", "rate"]},
    ]
    text = run(["status", "site"], env).stdout
    assert (
        "    a.example: 8 in flight, delay 0.250s, latency 1.000s, held back by AutoThrottle, concurrency cap" in text
    )
