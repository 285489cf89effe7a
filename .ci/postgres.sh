# Sourced by .ci/run: start a throwaway PostgreSQL server for the service's ledger tests.
# Installs Debian's postgresql package if needed (CI runs as root), starts a cluster on a free
# loopback port in a temporary data directory, exports OVERLAPDP_TEST_POSTGRES and stops the
# server when the sourcing shell exits. Without root or apt-get it only says why and the tests skip.
_pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ -z "$(_pg_bin)" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing postgresql (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
fi
PG_BIN="$(_pg_bin)"
if [ -n "$PG_BIN" ] && [ -z "${OVERLAPDP_TEST_POSTGRES:-}" ]; then
  PG_DIR="$(mktemp -d /tmp/overlapdp-pg.XXXXXX)"
  PG_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  PG_RUN=()
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$PG_DIR"
    PG_RUN=(runuser -u postgres --)
  fi
  "${PG_RUN[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -A trust -U postgres --no-sync >/dev/null
  "${PG_RUN[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/log" -w -o \
    "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=on" start >/dev/null
  export OVERLAPDP_TEST_POSTGRES="postgresql://postgres@127.0.0.1:$PG_PORT/postgres"
  _pg_stop() { "${PG_RUN[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null 2>&1 || true; rm -rf "$PG_DIR"; }
  trap _pg_stop EXIT
  echo "== PostgreSQL on 127.0.0.1:$PG_PORT for the ledger tests"
elif [ -z "$PG_BIN" ]; then
  echo "== PostgreSQL not available: the PostgreSQL ledger tests will be skipped"
fi
