#!/usr/bin/env bash
# Install what the tests need, make sure Redis and MariaDB answer, and run the test suite.
#   bash tests/run.sh [pytest arguments]
# Needs: Debian (apt-get, as root, for missing system packages) and Python 3.11 with venv.
set -euo pipefail
cd "$(dirname "$0")/.."

# Two runs on one machine would share Redis databases 13-15: the second waits for the first.
# This shell holds the lock (fd 9) until the run ends and nothing it starts inherits it: main runs
# with fd 9 closed (bash keeps its own copy close-on-exec), so no server, pytest or test child
# keeps the lock after a killed run. pytest is this shell's child, not exec'd, and gets SIGTERM
# if the shell dies (setpriv --pdeathsig), so no run goes on without the lock either.
lock="${CRAWLER_TESTS_LOCK:-/tmp/crawler-tests.lock}"
exec 9>"$lock"
if ! flock -n 9; then
  echo "tests/run.sh: another test run holds $lock; waiting for it"
  flock 9
fi

# A venv at .venv-scrapy-<version> holding the test requirements with that Scrapy in place of
# requirements.txt's (2.11 and 2.12 with the w3lib and Twisted they work with).
scrapy_venv() {
  local version=$1 venv=".venv-scrapy-$1" extra=()
  case "$version" in 2.11.*|2.12.*) extra=("w3lib<2.2" "Twisted<25") ;; esac
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  grep -v '^scrapy==' requirements.txt > "$venv/requirements.txt"
  grep -v '^-r ' requirements-test.txt > "$venv/requirements-test.txt"
  if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$venv/requirements.txt" \
      -r "$venv/requirements-test.txt" "scrapy==$version" "${extra[@]}" >"$venv/pip.log" 2>&1; then
    cat "$venv/pip.log" >&2
    return 1
  fi
}

#: The oldest Scrapy supported (pyproject.toml), whose run of the core tests is part of every run,
#: and the newest patch of every minor up to requirements.txt's, which --scrapy-matrix runs.
OLDEST_SCRAPY=2.11.2
MATRIX_SCRAPY=(2.11.2 2.12.0 2.13.4 2.14.2 2.15.2 2.16.0 2.17.0 2.18.0)

main() {
local matrix=0
if [ "${1:-}" = --scrapy-matrix ]; then
  matrix=1
  shift
fi
missing=()
[ -f /usr/share/doc/python3.11/html/index.html ] || missing+=(python3.11-doc)
# tests/test_pagetext.py: Debian's doc sites in Japanese, Russian and Chinese (conftest.DEBIAN_DOC_SITES).
for pkg in aptitude-doc-ja aptitude-doc-ru developers-reference-ru debian-reference-zh-cn; do
  dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
command -v redis-server >/dev/null || missing+=(redis-server)
command -v mariadbd >/dev/null || missing+=(mariadb-server)
# libfaketime: tests/test_clock.py runs a worker whose wall clock is minutes off.
[ -f /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || missing+=(faketime)
# tests/test_deploy_smoke.py: deploy/smoke.sh builds and runs the images with rootful podman (it
# installs these itself too; here they come in the one apt-get run). Not root: the test is skipped.
if [ "$(id -u)" = 0 ]; then
  for pkg in podman runc mmdebstrap netavark aardvark-dns iptables uidmap slirp4netns fuse-overlayfs; do
    dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "tests/run.sh: please install: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

# The tests use Redis databases 13-15 (only the keys of the spiders named in conftest.SPIDERS) and a
# MariaDB database of their own, created and dropped by the test session. Start the servers if they are down.
if ! redis-cli -h "${TEST_REDIS_HOST:-127.0.0.1}" -p "${TEST_REDIS_PORT:-6379}" ping >/dev/null 2>&1; then
  echo "tests/run.sh: starting redis-server on 127.0.0.1:6379 (no persistence)"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
fi
if ! mysqladmin -h "${TEST_MYSQL_HOST:-127.0.0.1}" -P "${TEST_MYSQL_PORT:-3306}" -uroot ping >/dev/null 2>&1; then
  echo "tests/run.sh: starting mariadbd"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  for _ in $(seq 60); do mysqladmin -h 127.0.0.1 -uroot ping >/dev/null 2>&1 && break; sleep 0.5; done
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-test.txt >.venv/pip.log 2>&1; then
  cat .venv/pip.log >&2
  exit 1
fi
# Lint first (rules in pyproject.toml): a failure stops the run with the file and line.
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
# Types: the package ships py.typed (pyproject.toml [tool.mypy]).
.venv/bin/mypy
if [ "$matrix" = 1 ]; then
  # --scrapy-matrix: the core tests on every minor from the oldest, then on requirements.txt's below
  local failed=()
  for version in "${MATRIX_SCRAPY[@]}"; do
    echo "tests/run.sh: the core tests on Scrapy $version"
    scrapy_venv "$version" || { failed+=("$version (install)"); continue; }
    CI="${CI:-}" setpriv --pdeathsig TERM ".venv-scrapy-$version/bin/python" -m pytest -p no:cacheprovider \
      -n "${TEST_WORKERS:-3}" --dist worksteal -m core "$@" || failed+=("$version")
  done
  echo "tests/run.sh: Scrapy ${MATRIX_SCRAPY[*]}: ${failed[*]:-all passed}"
  [ ${#failed[@]} = 0 ] || return 1
  set -- -m core "$@"
fi
# Three test processes (pytest-xdist; each its own Redis database, see tests/conftest.py): most tests
# wait on crawls and servers, so three share two cores well. TEST_WORKERS=0 runs them in this process.
# worksteal: a process that is done takes tests queued for another, so the crawls of minutes do
# not end up queued behind each other on one process.
# The tests that measure speed, load or shares against a bound (marker timing) run after the
# others, one at a time: beside two other test processes' crawls on two cores they would measure
# the machine's load. A run that selects none of them (pytest's exit status 5) is no failure; a
# first run that was interrupted (killed, or stopped with Ctrl-C: status 2 or above 128) ends it all.
local status=0 timed=0
CRAWLER_TIMING=skip CI="${CI:-}" setpriv --pdeathsig TERM .venv/bin/python -m pytest -n "${TEST_WORKERS:-3}" \
  --dist worksteal "$@" || status=$?
if [ "$status" = 2 ] || [ "$status" -gt 128 ]; then
  return "$status"
fi
CRAWLER_TIMING=only CI="${CI:-}" setpriv --pdeathsig TERM .venv/bin/python -m pytest -p no:xdist "$@" || timed=$?
[ "$timed" = 5 ] && timed=0
[ "$status" = 5 ] && status=0
[ "$status" != 0 ] && return "$status"
[ "$timed" != 0 ] && return "$timed"
# The core tests again on the oldest Scrapy supported (timing ones included: one process).
echo "tests/run.sh: the core tests on Scrapy $OLDEST_SCRAPY"
scrapy_venv "$OLDEST_SCRAPY"
CI="${CI:-}" setpriv --pdeathsig TERM ".venv-scrapy-$OLDEST_SCRAPY/bin/python" -m pytest -p no:cacheprovider \
  -n "${TEST_WORKERS:-3}" --dist worksteal -m core "$@"
}

main "$@" 9>&-
