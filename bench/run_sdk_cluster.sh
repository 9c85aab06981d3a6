#!/usr/bin/env bash
# relaykit's scale-out mode against a2a-sdk 1.3.0's cluster mode (`a2a.server.cluster`: PostgreSQL task store with
# versioned writes and an event table tailed by polling) on the same PostgreSQL: one replica each, listening on the
# port itself (no proxy, so the harness reads the replica's own CPU; neither side's PostgreSQL/Redis CPU is counted),
# alternating, ROUNDS rounds; X2=1 adds 2 replicas of each behind bench/cluster.py's round-robin proxy. SendMessage at
# 1/16/64 clients and one 1,000-chunk stream. Needs the services of CONTRACT "Test services", relaykit importable by
# `python3` (the venv activated), ../shared/bench/peers/setup.sh (the load generator) and bench/sdk_cluster/setup.sh.
# The SDK replicas keep SDK_POOL (default 16) connections open (SQLAlchemy's default pool, 5 + 10 that it closes
# again, opens a connection every other request at 16 clients); SDK_DEFAULT_POOL=1 adds a one-replica peer on that
# default pool. Each round's 1-minute load is in OUT/run.log; per-round ratios in OUT/rounds.md. Extra args go to
# a2a_bench.py. QUIET=1.0 starts every run below that 1-minute load (bench/compare_quiet.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-/tmp/relaykit-bench-sdk-cluster}
SHARED=${SHARED:-../shared/bench}
PG=${RELAYKIT_TEST_PG:-postgresql://postgres@127.0.0.1:5432/test}
SDK_POOL=${SDK_POOL:-16}
PEERS=(
  "a2a-sdk-cluster-x1|v1|bench/sdk_cluster/start.sh {port} --no-proxy --pg $PG --pool-size $SDK_POOL"
  "relaykit-x1|v1|python3 bench/cluster.py {port} --replicas 1 --no-proxy --store $PG"
)
if [ "${X2:-0}" = 1 ]; then
  PEERS+=(
    "a2a-sdk-cluster-x2|v1|bench/sdk_cluster/start.sh {port} --replicas 2 --pg $PG --pool-size $SDK_POOL"
    "relaykit-x2|v1|python3 bench/cluster.py {port} --replicas 2 --store $PG"
  )
fi
if [ "${SDK_DEFAULT_POOL:-0}" = 1 ]; then
  PEERS+=("a2a-sdk-cluster-x1-defpool|v1|bench/sdk_cluster/start.sh {port} --no-proxy --pg $PG")
fi
rm -rf "$OUT"
mkdir -p "$OUT"
if [ -n "${QUIET:-}" ]; then  # every run starts below this 1-minute load (bench/compare_quiet.sh)
  bench/compare_quiet.sh -r "$ROUNDS" -o "$OUT" -P "${BASEPORT:-9701}" "${PEERS[@]}" -- --phases send,stream1k "$@"
else
  "$SHARED/compare.sh" -r "$ROUNDS" -o "$OUT" -P "${BASEPORT:-9701}" "${PEERS[@]}" \
    -- --phases send,stream1k "$@" | tee "$OUT/run.log"
fi
pairs=(a2a-sdk-cluster-x1:relaykit-x1)
[ "${SDK_DEFAULT_POOL:-0}" = 1 ] && pairs+=(a2a-sdk-cluster-x1-defpool:relaykit-x1)
[ "${X2:-0}" = 1 ] && pairs+=(a2a-sdk-cluster-x2:relaykit-x2 relaykit-x1:relaykit-x2 a2a-sdk-cluster-x1:a2a-sdk-cluster-x2)
python3 bench/rounds.py "$OUT" "${pairs[@]}" | tee "$OUT/rounds.md"
echo "summary: $OUT/summary.md, per round: $OUT/rounds.md"
