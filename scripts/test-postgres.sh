#!/usr/bin/env bash
# The tests' PostgreSQL: a server of its own on HOST:PORT (default 127.0.0.1:5432), user postgres,
# trust auth, data in FLEETVAL_PG_DATA (default /var/tmp/fleetval-test-pg). Installs Debian's
# postgresql where it is missing and this runs as root; touches no cluster of the machine's own.
# Durability is off (fsync, full-page writes): the data is the tests' and is thrown away.
# Usage: scripts/test-postgres.sh [start|stop]
set -euo pipefail
host=${PG_HOST:-127.0.0.1}
port=${PG_PORT:-5432}
data=${FLEETVAL_PG_DATA:-/var/tmp/fleetval-test-pg}

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

up() {
  # -h/-p probe the server itself; a refusal ("no response") means nothing listens yet.
  [ -n "$(bindir)" ] && "$(bindir)/pg_isready" -q -h "$host" -p "$port" -t 2
}

as_owner() {  # PostgreSQL refuses to run as root: run its tools as the postgres user
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-start}" in
stop)
  [ -d "$data" ] && as_owner "$(bindir)/pg_ctl" -D "$data" -m fast stop >/dev/null 2>&1 || true
  exit 0
  ;;
start) ;;
*) echo "usage: $0 [start|stop]" >&2; exit 2 ;;
esac

up && exit 0

if [ -z "$(bindir)" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "postgres: installing Debian's postgresql"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "error: PostgreSQL is not installed. Install it (Debian: apt-get install postgresql), or set" >&2
    echo "       FLEETVAL_TEST_DB_URL=postgresql://USER@HOST:PORT/postgres (a user that may CREATE DATABASE)." >&2
    exit 1
  fi
fi
bin=$(bindir)

if [ ! -s "$data/PG_VERSION" ]; then
  echo "postgres: creating a test cluster in $data"
  mkdir -p "$data"
  [ "$(id -u)" = 0 ] && chown postgres: "$data"
  chmod 700 "$data"
  as_owner "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
fi
sockets="$data/sockets"  # not /var/run/postgresql: it may not exist or belong to another server
as_owner mkdir -p "$sockets"
echo "postgres: starting on $host:$port"
as_owner "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 start -o \
  "-h $host -p $port -k $sockets -c fsync=off -c full_page_writes=off -c synchronous_commit=off -c max_connections=300" \
  >/dev/null || { tail -n 20 "$data/server.log" >&2; exit 1; }
up
