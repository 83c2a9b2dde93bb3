#!/bin/sh
# The official mariadb image's healthcheck.sh, for the two tests deploy/compose.yaml asks for:
# --connect (the server accepts a connection) and --innodb_initialized (InnoDB is up).
set -eu
for test in "$@"; do
  case "$test" in
    --connect) mariadb-admin --protocol=socket ping >/dev/null ;;
    --innodb_initialized)
      [ "$(mariadb --protocol=socket -N -B -e "SELECT 1 FROM information_schema.ENGINES WHERE engine = 'InnoDB' AND support IN ('YES', 'DEFAULT')")" = 1 ] ;;
    *) echo "healthcheck.sh: unknown test $test" >&2; exit 2 ;;
  esac
done
