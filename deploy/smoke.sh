#!/usr/bin/env bash
# deploy/ built and run on this host, without Docker Hub: podman (Debian's packages) builds a
# Debian base image (mmdebstrap), local stand-ins for the Hub images compose.yaml names
# (deploy/podman/Containerfile) and the worker image from deploy/Dockerfile, unchanged; then
# podman-compose runs deploy/compose.yaml with deploy/compose.podman.yaml (Redis, MariaDB, two
# scrapyd workers, Prometheus, and a `docs` site to crawl), schedules the `site` job on both
# workers, pushes the site's start URL and checks that every page reachable on the site is in
# MariaDB once, that both jobs finished, and that Prometheus scraped both workers.
#
#   bash deploy/smoke.sh [--subtree DIR] [--workdir DIR]
#
#   --subtree DIR   the part of Debian's Python docs (/usr/share/doc/python3.11/html/DIR) served
#                   as the site (default: c-api, 64 pages)
#   --workdir DIR   where the log and the site copy go (default: a new /tmp/crawler-smoke.*,
#                   removed after a success)
#
# Needs root on Debian (apt-get installs what is missing) and a package index for pip: the
# build uses the host's network, CA bundle (SMOKE_CA_BUNDLE, else PIP_CERT, pip's `cert`,
# REQUESTS_CA_BUNDLE, SSL_CERT_FILE, /etc/ssl/certs/ca-certificates.crt) and index
# (PIP_INDEX_URL or pip's `index-url`, if set).
# Images are kept as a cache (localhost/crawler-smoke-*, localhost/crawler-worker:smoke): a
# second run rebuilds only what changed. Containers, volumes and the network are removed at
# the end, whatever happened. Success: a few `smoke:` lines with the figures, exit 0.
# Failure: one line, `deploy/smoke.sh: failed at step 'STEP': REASON (log: FILE)`, exit 1.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
ME="deploy/smoke.sh"
CACHE="${SMOKE_CACHE:-/var/tmp/crawler-smoke}"
DOCS="${DOCS_DIR:-/usr/share/doc/python3.11/html}"
PODMAN_COMPOSE_VERSION=1.6.0
ROOTFS_IMAGE=localhost/crawler-smoke-rootfs:bookworm
PYTHON_IMAGE=localhost/crawler-smoke-python:3.11
WORKER_IMAGE=localhost/crawler-worker:smoke
SUBTREE=c-api
WORKDIR=""
KEEP_WORKDIR=0
# Job settings: the jobs stop once the crawl has been idle this long, which leaves Prometheus
# (scrape_interval 15s in deploy/prometheus.yml) time to scrape them after the last page.
IDLE_SECONDS=20

step=options
failed=""
LOG=/dev/null
PROJECT=""
T0=$(date +%s.%N)
declare -A SECONDS_OF

fail() {  # fail REASON: the one failure line (after the cleanup, by the EXIT trap)
  failed="$1"
  exit 1
}

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >>"$LOG"; }

# run CMD...: the command's output goes to the log; a failure names the command and the last
# line it printed.
run() {
  log "+ $*"
  local out rc
  out="$("$@" 2>&1)"
  rc=$?
  printf '%s\n' "$out" >>"$LOG"
  if [ $rc -ne 0 ]; then
    # The reason: podman's first "Error: ..." line, else the last line printed.
    local last name="$1"
    [ "$name" != compose ] || name=podman-compose
    last="$(printf '%s\n' "$out" | grep -m 1 '^Error: ')" \
      || last="$(printf '%s\n' "$out" | grep -v '^[[:space:]]*$' | tail -n 1)"
    fail "$name exited $rc${last:+: ${last:0:300}}"
  fi
}

timed() {  # timed NAME: close the timing of a step
  local now
  now=$(date +%s.%N)
  SECONDS_OF[$1]=$(awk -v a="${STEP_T0:-$T0}" -v b="$now" 'BEGIN { printf "%.1f", b - a }')
  STEP_T0=$now
}

compose() {
  "$CACHE/venv/bin/podman-compose" --in-pod false -p "$PROJECT" \
    -f "$HERE/compose.yaml" -f "$HERE/compose.podman.yaml" "$@"
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$PROJECT" ]; then
    log "cleanup of project $PROJECT"
    if [ -n "$failed" ] || [ $rc -ne 0 ]; then
      local id
      podman ps -a --filter "label=io.podman.compose.project=$PROJECT" >>"$LOG" 2>&1
      for id in $(podman ps -aq --filter "label=io.podman.compose.project=$PROJECT" 2>/dev/null); do
        echo "--- podman logs $(podman inspect --format '{{.Name}}' "$id" 2>/dev/null) (last 60 lines)"
        podman logs --tail 60 "$id" 2>&1
      done >>"$LOG"
    fi
    if [ -x "$CACHE/venv/bin/podman-compose" ]; then
      compose down -v -t 5 >>"$LOG" 2>&1
    fi
    # Whatever podman-compose left (an interrupted `up`): by its project label.
    local label="label=io.podman.compose.project=$PROJECT" ids
    ids="$(podman ps -aq --filter "$label" 2>/dev/null)"
    [ -z "$ids" ] || podman rm -f -t 2 $ids >>"$LOG" 2>&1
    ids="$(podman volume ls -q --filter "$label" 2>/dev/null)"
    [ -z "$ids" ] || podman volume rm -f $ids >>"$LOG" 2>&1
    podman network exists "${PROJECT}_default" 2>/dev/null && podman network rm -f "${PROJECT}_default" >>"$LOG" 2>&1
    podman pod exists "pod_$PROJECT" 2>/dev/null && podman pod rm -f "pod_$PROJECT" >>"$LOG" 2>&1
  fi
  if [ -n "$failed" ] || [ $rc -ne 0 ]; then
    [ -n "$failed" ] || failed="exit status $rc"
    local where=""
    [ "$LOG" = /dev/null ] || where=" (log: $LOG)"
    # The work directory stays: the log is in it.
    echo "$ME: failed at step '$step': $failed$where" >&2
    exit 1
  fi
  [ $KEEP_WORKDIR = 1 ] || [ -z "$WORKDIR" ] || rm -rf "$WORKDIR"
  exit 0
}
trap cleanup EXIT
trap 'failed="interrupted"; exit 1' INT TERM

# ---------------------------------------------------------------------------------------------
# options
while [ $# -gt 0 ]; do
  case "$1" in
    --subtree) [ $# -ge 2 ] || fail "--subtree needs a value"; SUBTREE="$2"; shift 2 ;;
    --workdir) [ $# -ge 2 ] || fail "--workdir needs a value"; WORKDIR="$2"; KEEP_WORKDIR=1; shift 2 ;;
    -h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) fail "unknown option $1 (see --help)" ;;
  esac
done
case "$SUBTREE" in */*|.*|"") fail "--subtree must be one directory name of $DOCS" ;; esac
if [ -z "$WORKDIR" ]; then
  WORKDIR="$(mktemp -d /tmp/crawler-smoke.XXXXXX)" || fail "cannot make a work directory"
else
  mkdir -p "$WORKDIR" || fail "cannot make $WORKDIR"
  WORKDIR="$(cd "$WORKDIR" && pwd)"
fi
LOG="$WORKDIR/smoke.log"
: >"$LOG"
[ "$(id -u)" = 0 ] || fail "run as root (rootful podman, apt-get)"
export CONTAINERS_CONF="$HERE/podman/containers.conf"
mkdir -p "$CACHE" || fail "cannot make $CACHE"
# Two runs on one host take turns (the image builds would race, and share two cores badly).
exec 8>"$CACHE/lock"
flock -w 1200 8 || fail "another deploy/smoke.sh holds $CACHE/lock"

# ---------------------------------------------------------------------------------------------
step="package install"
need=()
for pkg in podman runc mmdebstrap netavark aardvark-dns iptables uidmap slirp4netns fuse-overlayfs python3.11-doc; do
  dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  run apt-get update -qq
  run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
if ! "$CACHE/venv/bin/podman-compose" --version 2>/dev/null | grep -q "podman-compose version $PODMAN_COMPOSE_VERSION"; then
  rm -rf "$CACHE/venv"
  run python3 -m venv "$CACHE/venv"
  run "$CACHE/venv/bin/pip" install -q --disable-pip-version-check "podman-compose==$PODMAN_COMPOSE_VERSION"
fi
[ -f "$DOCS/$SUBTREE/index.html" ] || fail "$DOCS/$SUBTREE/index.html does not exist (--subtree)"
run podman run --rm --network none --rootfs /:O /bin/true
timed packages

# ---------------------------------------------------------------------------------------------
step="base image"
if ! podman image exists "$ROOTFS_IMAGE"; then
  # Debian's minimal root file system, from the mirror apt uses.
  run mmdebstrap --variant=minbase --quiet bookworm "$WORKDIR/rootfs.tar"
  run podman import --quiet "$WORKDIR/rootfs.tar" "$ROOTFS_IMAGE"
  rm -f "$WORKDIR/rootfs.tar"
fi
for target in python redis mariadb prometheus; do
  tag="localhost/crawler-smoke-$target:bookworm"
  [ $target = python ] && tag="$PYTHON_IMAGE"
  run podman build --quiet --network host --target "$target" -t "$tag" \
    -f "$HERE/podman/Containerfile" "$HERE/podman"
done
timed base

# ---------------------------------------------------------------------------------------------
step=build
# pip in the build reaches the index as this host's pip does: the host's network, its CA bundle
# (a proxy that re-signs certificates is trusted only through it) and its index URL.
bundle="${SMOKE_CA_BUNDLE:-${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}}"
bundle="${bundle:-${REQUESTS_CA_BUNDLE:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}}"
[ -f "$bundle" ] || fail "CA bundle $bundle does not exist (SMOKE_CA_BUNDLE)"
index="${PIP_INDEX_URL:-$(python3 -m pip config get global.index-url 2>/dev/null || true)}"
{
  echo "[global]"
  echo "cert = /etc/ssl/certs/ca-certificates.crt"
  [ -z "$index" ] || echo "index-url = $index"
} >"$WORKDIR/pip.conf"
run podman build --quiet --network host --from "$PYTHON_IMAGE" \
  -v "$bundle:/etc/ssl/certs/ca-certificates.crt:ro" -v "$WORKDIR/pip.conf:/etc/pip.conf:ro" \
  -f "$HERE/Dockerfile" -t "$WORKER_IMAGE" "$ROOT"
image_size="$(podman image inspect --format '{{.Size}}' "$WORKER_IMAGE" | awk '{printf "%d MB", $1 / 1e6}')"
timed build

# ---------------------------------------------------------------------------------------------
step=start
PROJECT="crawler-smoke-$$"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
WORKER1_PORT=$(free_port); WORKER2_PORT=$(free_port); PROMETHEUS_PORT=$(free_port); GRAFANA_PORT=$(free_port)
DB_PASSWORD="smoke-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
export WORKER1_PORT WORKER2_PORT PROMETHEUS_PORT GRAFANA_PORT DB_PASSWORD
mkdir -p "$WORKDIR/site" && cp -r "$DOCS/$SUBTREE" "$WORKDIR/site/" || fail "cannot copy $DOCS/$SUBTREE"
export SMOKE_SITE="$WORKDIR/site"
run compose config --quiet
run compose up -d --no-build redis mariadb worker1 worker2 prometheus docs

container() { podman ps -q --filter "label=io.podman.compose.project=$PROJECT" --filter "label=io.podman.compose.service=$1" | head -n 1; }
wait_for() {  # wait_for SECONDS WHAT CMD...
  local deadline=$(( $(date +%s) + $1 )) what="$2"
  shift 2
  until "$@" >>"$LOG" 2>&1; do
    [ "$(date +%s)" -lt $deadline ] || fail "$what did not answer in time"
    sleep 0.5
  done
  log "$what answers"
}
api() { curl -fsS --max-time 10 "$@"; }
# Without systemd podman runs no healthcheck on a timer: each one is run here, by hand.
wait_for 60 "redis (redis-cli ping)" podman healthcheck run "$(container redis)"
wait_for 120 "mariadb (healthcheck.sh)" podman healthcheck run "$(container mariadb)"
wait_for 60 "worker1 (daemonstatus.json)" podman healthcheck run "$(container worker1)"
wait_for 60 "worker2 (daemonstatus.json)" podman healthcheck run "$(container worker2)"
wait_for 60 "prometheus (/-/ready)" api "http://127.0.0.1:$PROMETHEUS_PORT/-/ready"
# deploy/alerts.yml, loaded by this Prometheus (a rule it cannot parse stops it at start).
rules="$(api "http://127.0.0.1:$PROMETHEUS_PORT/api/v1/rules?type=alert" 2>>"$LOG" | python3 -c 'import json, sys; print(sum(len(g["rules"]) for g in json.load(sys.stdin)["data"]["groups"]))' 2>>"$LOG")"
[ "${rules:-0}" -gt 0 ] || fail "Prometheus loaded no alert rule from deploy/alerts.yml"
wait_for 30 "docs (http.server)" podman exec "$(container worker1)" python -c \
  "import urllib.request; urllib.request.urlopen('http://docs:8000/$SUBTREE/index.html', timeout=2)"
timed start

# ---------------------------------------------------------------------------------------------
step="crawl check"
# What must be stored: the pages reachable from the start page (tests/oracle.py, run in the
# worker image, which has its lxml and Scrapy).
podman run --rm --network none -v "$ROOT/tests/oracle.py:/oracle/oracle.py:ro" -v "$WORKDIR/site:/site:ro" \
  "$WORKER_IMAGE" python -c "import sys; sys.path.insert(0, '/oracle'); from pathlib import Path; from oracle import reachable_pages; print('\n'.join(sorted(reachable_pages(Path('/site'), '$SUBTREE/index.html'))))" \
  >"$WORKDIR/expected.txt" 2>>"$LOG" || fail "tests/oracle.py failed in the worker image"
sed -i 's|^|http://docs:8000/|' "$WORKDIR/expected.txt"
expected=$(wc -l <"$WORKDIR/expected.txt")
[ "$expected" -gt 0 ] || fail "no page is reachable from $SUBTREE/index.html"

jobs=()
for port in $WORKER1_PORT $WORKER2_PORT; do
  answer="$(api "http://127.0.0.1:$port/schedule.json" -d project=crawler -d spider=site \
    -d setting=MAX_IDLE_TIME_BEFORE_CLOSE=$IDLE_SECONDS 2>>"$LOG")" || fail "schedule.json on 127.0.0.1:$port failed"
  log "schedule.json: $answer"
  job="$(printf '%s' "$answer" | python3 -c 'import json, sys; a = json.load(sys.stdin); print(a["jobid"] if a.get("status") == "ok" else "")')"
  [ -n "$job" ] || fail "schedule.json on 127.0.0.1:$port answered $answer"
  jobs+=("$job")
done
job_log() { api "http://127.0.0.1:$1/logs/crawler/site/$2.log" 2>/dev/null; }
joined() { job_log "$WORKER1_PORT" "${jobs[0]}" | grep -q "Joined the crawl" && job_log "$WORKER2_PORT" "${jobs[1]}" | grep -q "Joined the crawl"; }
wait_for 60 "both jobs joining the crawl" joined
start_url="http://docs:8000/$SUBTREE/index.html"
run podman exec -w /app "$(container worker1)" scrapy push site "$start_url"
CRAWL_T0=$(date +%s)

# While the jobs run: Prometheus's targets for both workers up, and crawler_pages_total answers.
prom_up=""
prom_pages=""
prometheus_saw_both() {
  local targets query
  targets="$(api "http://127.0.0.1:$PROMETHEUS_PORT/api/v1/targets?state=active")" || return 1
  prom_up="$(printf '%s' "$targets" | python3 -c 'import json, sys; t = json.load(sys.stdin)["data"]["activeTargets"]; print(",".join(sorted(x["labels"]["instance"] for x in t if x["health"] == "up" and x["labels"]["job"] == "crawler")))')"
  [ "$prom_up" = "worker1:9410,worker2:9410" ] || return 1
  query="$(api "http://127.0.0.1:$PROMETHEUS_PORT/api/v1/query" --data-urlencode 'query=sum(crawler_pages_total{job="crawler"})')" || return 1
  prom_pages="$(printf '%s' "$query" | python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else 0)')"
  [ "${prom_pages:-0}" -gt 0 ]
}
finished() {
  api "http://127.0.0.1:$1/listjobs.json?project=crawler" | python3 -c 'import json, sys; a = json.load(sys.stdin); sys.exit(0 if a["finished"] and not a["running"] and not a["pending"] else 1)'
}
seen_by_prometheus=0
seen_pages=0
deadline=$(( $(date +%s) + 180 ))
polls=0
while :; do
  # Every second until Prometheus has seen both workers, then every 5 s for the latest count.
  if { [ $seen_by_prometheus = 0 ] || [ $((polls % 5)) = 0 ]; } && prometheus_saw_both 2>>"$LOG"; then
    seen_by_prometheus=1
    [ "$prom_pages" -le "$seen_pages" ] || seen_pages=$prom_pages
    log "prometheus: up $prom_up, crawler_pages_total $prom_pages"
  fi
  polls=$((polls + 1))
  if finished "$WORKER1_PORT" 2>>"$LOG" && finished "$WORKER2_PORT" 2>>"$LOG"; then break; fi
  [ "$(date +%s)" -lt $deadline ] || fail "the jobs did not finish in 180 s"
  sleep 1
done
crawl_seconds=$(( $(date +%s) - CRAWL_T0 ))
[ $seen_by_prometheus = 1 ] || fail "Prometheus did not see both workers up with crawler_pages_total > 0 while the jobs ran (targets up: ${prom_up:-none})"

items=()
for i in 0 1; do
  port=$WORKER1_PORT; [ $i = 1 ] && port=$WORKER2_PORT
  job_log "$port" "${jobs[$i]}" >"$WORKDIR/job$((i + 1)).log" || fail "no log for job ${jobs[$i]}"
  grep -q "'finish_reason': 'finished'" "$WORKDIR/job$((i + 1)).log" || fail "job ${jobs[$i]} on worker$((i + 1)) did not finish normally (log: $WORKDIR/job$((i + 1)).log)"
  ! grep -q "Traceback" "$WORKDIR/job$((i + 1)).log" || fail "job ${jobs[$i]} on worker$((i + 1)) logged a traceback (log: $WORKDIR/job$((i + 1)).log)"
  items+=("$(grep -o "'item_scraped_count': [0-9]*" "$WORKDIR/job$((i + 1)).log" | grep -o '[0-9]*$' || echo 0)")
done

podman exec -e MYSQL_PWD="$DB_PASSWORD" "$(container mariadb)" \
  mariadb -h 127.0.0.1 -u crawler -N -B crawl -e "SELECT url FROM pages" >"$WORKDIR/stored.txt" 2>>"$LOG" \
  || fail "SELECT url FROM pages failed in MariaDB"
stored=$(wc -l <"$WORKDIR/stored.txt")
duplicates=$(sort "$WORKDIR/stored.txt" | uniq -d | wc -l)
missing=$(sort -u "$WORKDIR/stored.txt" | comm -13 - <(sort "$WORKDIR/expected.txt") | wc -l)
extra=$(sort -u "$WORKDIR/stored.txt" | comm -23 - <(sort "$WORKDIR/expected.txt") | wc -l)
log "pages: expected $expected, stored $stored, duplicates $duplicates, missing $missing, extra $extra"
[ "$duplicates" = 0 ] && [ "$missing" = 0 ] && [ "$extra" = 0 ] \
  || fail "pages: $expected expected, $stored rows, $duplicates stored twice, $missing missing, $extra not expected"
timed crawl

# ---------------------------------------------------------------------------------------------
step=report
total=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "smoke: pages expected=$expected stored=$stored duplicates=0 missing=0 extra=0"
echo "smoke: jobs finished=2 items=${items[0]},${items[1]}"
echo "smoke: prometheus up=worker1:9410,worker2:9410 crawler_pages_total=$seen_pages alert_rules=$rules"
echo "smoke: seconds packages=${SECONDS_OF[packages]} base=${SECONDS_OF[base]} build=${SECONDS_OF[build]} start=${SECONDS_OF[start]} crawl=${SECONDS_OF[crawl]} total=$total (pages in ${crawl_seconds}s, with the ${IDLE_SECONDS}s idle end)"
echo "smoke: image $WORKER_IMAGE $image_size"
echo "smoke: ok"
