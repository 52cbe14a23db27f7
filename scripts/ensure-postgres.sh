#!/usr/bin/env bash
# Makes sure the local PostgreSQL server the tests use (127.0.0.1:5432) is up:
# starts the machine's cluster when it is down and waits until it accepts
# connections. Fails loudly when PostgreSQL is not installed or will not start,
# so Postgres tests fail instead of being skipped. Run by .ci/run and by the
# vitest global setup (which then falls back to the embedded Postgres of
# node_modules); safe to run when the server is already up.
set -euo pipefail

HOST="${PGHOST_FOR_TESTS:-127.0.0.1}"
PORT="${PGPORT_FOR_TESTS:-5432}"

if ! command -v pg_isready >/dev/null 2>&1; then
  echo "ensure-postgres: PostgreSQL is not installed (no pg_isready). Install it (Debian: apt-get install postgresql) — the Postgres tests need a server on $HOST:$PORT." >&2
  exit 1
fi

if pg_isready -q -h "$HOST" -p "$PORT"; then
  exit 0
fi

if [ ! -d /etc/postgresql ] || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
  echo "ensure-postgres: no PostgreSQL cluster found under /etc/postgresql, and nothing answers on $HOST:$PORT." >&2
  exit 1
fi

version="$(ls /etc/postgresql | sort -V | tail -n 1)"
# Starting a cluster that listens elsewhere would only wait out the timeout below.
cluster_port="$(pg_lsclusters --no-header 2>/dev/null | awk -v v="$version" '$1 == v && $2 == "main" { print $3 }')"
if [ -n "$cluster_port" ] && [ "$cluster_port" != "$PORT" ]; then
  echo "ensure-postgres: PostgreSQL $version (cluster main) listens on port $cluster_port, and nothing answers on $HOST:$PORT." >&2
  exit 1
fi
echo "ensure-postgres: starting PostgreSQL $version (cluster main)" >&2
pg_ctlcluster --skip-systemctl-redirect "$version" main start || true

for _ in $(seq 1 60); do
  if pg_isready -q -h "$HOST" -p "$PORT"; then
    exit 0
  fi
  sleep 0.5
done

echo "ensure-postgres: PostgreSQL $version did not accept connections on $HOST:$PORT within 30 s; see /var/log/postgresql/." >&2
exit 1
