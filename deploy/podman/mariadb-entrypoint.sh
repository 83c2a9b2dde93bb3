#!/bin/sh
# The parts of the official mariadb image's entry point that deploy/compose.yaml uses: on an
# empty data directory, create the system tables, the database MARIADB_DATABASE, the user
# MARIADB_USER with MARIADB_PASSWORD (all privileges on that database), a random root password
# (MARIADB_RANDOM_ROOT_PASSWORD: root and the mysql user are reachable only through the socket, by those system users) and run
# /docker-entrypoint-initdb.d/*.sql in that database; then start the server on every interface.
set -eu
datadir=/var/lib/mysql
if [ "${1:-}" = mariadbd ] && [ ! -d "$datadir/mysql" ]; then
  mariadb-install-db --datadir="$datadir" --skip-test-db --auth-root-authentication-method=socket --auth-root-socket-user=mysql >/dev/null
  mariadbd --datadir="$datadir" --skip-networking --socket=/run/mysqld/init.sock &
  pid=$!
  i=0
  until mariadb-admin --socket=/run/mysqld/init.sock ping >/dev/null 2>&1; do
    i=$((i + 1)); [ "$i" -lt 120 ] || { echo "docker-entrypoint.sh: mariadbd did not start" >&2; exit 1; }
    sleep 0.25
  done
  sql() { mariadb --socket=/run/mysqld/init.sock "$@"; }
  {
    if [ -n "${MARIADB_DATABASE:-}" ]; then
      echo "CREATE DATABASE IF NOT EXISTS \`$MARIADB_DATABASE\` CHARACTER SET utf8mb4;"
    fi
    if [ -n "${MARIADB_USER:-}" ]; then
      echo "CREATE USER '$MARIADB_USER'@'%' IDENTIFIED BY '${MARIADB_PASSWORD:-}';"
      [ -z "${MARIADB_DATABASE:-}" ] || echo "GRANT ALL ON \`$MARIADB_DATABASE\`.* TO '$MARIADB_USER'@'%';"
    fi
  } | sql
  for f in /docker-entrypoint-initdb.d/*.sql; do
    [ -e "$f" ] || continue
    echo "docker-entrypoint.sh: running $f"
    sql ${MARIADB_DATABASE:+"$MARIADB_DATABASE"} <"$f"
  done
  mariadb-admin --socket=/run/mysqld/init.sock shutdown
  wait "$pid" || true
fi
if [ "${1:-}" = mariadbd ]; then
  shift
  exec mariadbd --datadir="$datadir" --bind-address=0.0.0.0 --skip-name-resolve "$@"
fi
exec "$@"
