#!/usr/bin/env bash
# A PostgreSQL server on loopback, to try (and test) `python -m grader serve --db postgresql+psycopg://...`
# without a database administrator. Debian/Ubuntu, as root. Safe to run again: it installs what is
# missing, makes the cluster and the role once, and starts the server only when it is not running.
# The last line it prints is the URL the service's tests read from GRADER_TEST_PG_URL:
#
#   export GRADER_TEST_PG_URL=$(bash tools/postgres_local.sh)
#   bash tools/postgres_local.sh --stop
#
# The cluster is a cluster of its own ("grader", on port 5439), so that a PostgreSQL the machine
# already runs on 5432 is left alone. The role may create databases: each test makes its own and
# drops it after, so a test never meets another's rows.
set -euo pipefail
# Only the URL goes to stdout, which callers capture: pg_ctlcluster prints its notices there ("Removed stale
# pid file.", the systemd warning), and one of them once became part of the URL.
exec 3>&1 1>&2

CLUSTER=grader
PORT=${GRADER_PG_PORT:-5439}
ROLE=grader
PASSWORD=grader           # loopback only (pg_hba below); a test database, never a course's
DATABASE=grader_test

if [ "$(id -u)" != 0 ]; then
  echo "postgres_local: run as root (it installs packages and starts a server)" >&2
  exit 2
fi

version() { ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -1; }

if [ "${1:-}" = "--stop" ]; then
  v=$(version)
  [ -n "$v" ] && pg_ctlcluster "$v" "$CLUSTER" stop 2>/dev/null || true
  exit 0
fi

if [ -z "$(version)" ] || ! command -v pg_createcluster >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
v=$(version)

if ! pg_lsclusters -h | awk '{print $2}' | grep -qx "$CLUSTER"; then
  # Local connections as the postgres user need no password; TCP ones (the tests') do.
  pg_createcluster "$v" "$CLUSTER" --port "$PORT" -- --auth-local=peer --auth-host=scram-sha-256 >/dev/null
fi
conf=/etc/postgresql/$v/$CLUSTER/postgresql.conf
if ! grep -qx "listen_addresses = '127.0.0.1'" "$conf"; then
  echo "listen_addresses = '127.0.0.1'" >>"$conf"
fi
# Inside a container without systemd pg_ctlcluster starts the server itself.
status=$(pg_lsclusters -h | awk -v c="$CLUSTER" '$2 == c {print $4}')
if [ "$status" != online ]; then
  bash "$(dirname "$0")/start_daemon.sh" pg_ctlcluster "$v" "$CLUSTER" start
fi
for _ in $(seq 50); do
  runuser -u postgres -- psql -p "$PORT" -qAtc 'select 1' >/dev/null 2>&1 && break
  sleep 0.2
done

sql() { runuser -u postgres -- psql -p "$PORT" -v ON_ERROR_STOP=1 -qAtc "$1"; }
if [ "$(sql "select 1 from pg_roles where rolname = '$ROLE'")" != 1 ]; then
  sql "create role $ROLE login createdb password '$PASSWORD'" >/dev/null
fi
if [ "$(sql "select 1 from pg_database where datname = '$DATABASE'")" != 1 ]; then
  sql "create database $DATABASE owner $ROLE" >/dev/null
fi
echo "postgres_local: PostgreSQL $v cluster $CLUSTER up on 127.0.0.1:$PORT, database $DATABASE"
echo >&3 "postgresql+psycopg://$ROLE:$PASSWORD@127.0.0.1:$PORT/$DATABASE"
