#!/usr/bin/env bash
# The scale-out rows of bench/README.md: relaykit on its embedded default (SQLite, one process) against 1 and 2
# replicas on PostgreSQL + Redis behind a round-robin proxy (bench/cluster.py; the single replica also on its own
# port, no proxy), alternating, medians of ROUNDS rounds. Needs the services of CONTRACT "Test services" and
# ../shared/bench/peers/setup.sh. On a 2-core machine the replicas, PostgreSQL, Redis, the proxy and the load
# generator share the CPUs: read ratios, not absolutes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-/tmp/relaykit-bench-cluster}
SHARED=${SHARED:-../shared/bench}
rm -rf "$OUT"
mkdir -p "$OUT"
COMPARE="$SHARED/compare.sh"
[ -n "${QUIET:-}" ] && COMPARE=bench/compare_quiet.sh  # every run starts below this 1-minute load
"$COMPARE" -r "$ROUNDS" -o "$OUT" -P "${BASEPORT:-9601}" \
  "embedded-sqlite|v1|relaykit serve bench/echo.py --port {port} --store sqlite:///$OUT/bench-{port}.db --log-level warning" \
  "pg-redis-x1|v1|python3 bench/cluster.py {port} --replicas 1 --no-proxy" \
  "pg-redis-x1-proxy|v1|python3 bench/cluster.py {port} --replicas 1" \
  "pg-redis-x2|v1|python3 bench/cluster.py {port} --replicas 2" \
  -- --phases send,done,stream1k,streams,get "$@"
echo "summary: $OUT/summary.md"
