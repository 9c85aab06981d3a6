#!/usr/bin/env bash
# The HTTP comparison recorded in bench/README.md: a2a-sdk, relaykit (memory), relaykit (SQLite) and the bare
# Starlette echo ceiling, alternating, medians of ROUNDS rounds. Run from the repository root after
# ../shared/bench/peers/setup.sh. Results land in OUT (default /tmp/relaykit-bench). QUIET=1.0: every run starts
# below that 1-minute load (bench/compare_quiet.sh), as the scale-out runs do.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-/tmp/relaykit-bench}
SHARED=${SHARED:-../shared/bench}
rm -rf "$OUT"
mkdir -p "$OUT"
COMPARE="$SHARED/compare.sh"
[ -n "${QUIET:-}" ] && COMPARE=bench/compare_quiet.sh
"$COMPARE" -r "$ROUNDS" -o "$OUT" -P "${BASEPORT:-9501}" \
  "a2a-sdk|v1|$SHARED/peers/a2a_sdk/start.sh {port}" \
  "relaykit|v1|relaykit serve bench/echo.py --port {port} --store memory --log-level warning" \
  "relaykit-sqlite|v1|relaykit serve bench/echo.py --port {port} --store sqlite:///$OUT/bench-{port}.db --log-level warning" \
  "starlette-echo|v1|$SHARED/peers/baseline/start.sh starlette {port}"
echo "summary: $OUT/summary.md"
