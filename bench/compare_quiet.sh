#!/usr/bin/env bash
# ../shared/bench/compare.sh with a quiet start for every run: the same peers, rounds and alternation (A B C A B C
# ...), but before each peer's run it waits (bounded) until the 1-minute load average is below QUIET, so no run
# starts in the wake of the previous one (the method the scale-out issue measured with: "each started at a 1-minute
# load below 1.0"). Each run is one `compare.sh -r 1`; its files are renamed to the round they belong to, so OUT
# looks like one compare.sh run (OUT/LABEL.rN.json, OUT/summary.md, OUT/run.log with the load of each start).
# usage: bench/compare_quiet.sh [-r ROUNDS] [-o OUT] [-P BASEPORT] PEER... [-- BENCH_ARGS...]
# env: QUIET (default 1.0), QUIET_WAIT (seconds waited at most before a run, default 240; a run that starts above
#      QUIET says so in run.log), SHARED (default ../shared/bench), BENCH_PY as for compare.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared/bench}
QUIET=${QUIET:-1.0}
QUIET_WAIT=${QUIET_WAIT:-240}
ROUNDS=3
OUT=/tmp/relaykit-bench-quiet
BASEPORT=9801
while getopts "r:o:P:h" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;;
    o) OUT=$OPTARG ;;
    P) BASEPORT=$OPTARG ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
PEERS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do PEERS+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#PEERS[@]} -ge 1 ] || { sed -n '2,9p' "$0"; exit 2; }
PY=${BENCH_PY:-${BENCH_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/a2a-bench}/venv-bench/bin/python}
[ -x "$PY" ] || PY=python3
mkdir -p "$OUT"
: >"$OUT/run.log"

load1() { cut -d' ' -f1 /proc/loadavg; }
below() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

wait_quiet() {  # bounded by QUIET_WAIT
  local waited=0
  while ! below "$(load1)" "$QUIET" && [ "$waited" -lt "$QUIET_WAIT" ]; do
    sleep 5; waited=$((waited + 5))
  done
  below "$(load1)" "$QUIET" || echo "   (load still $(load1) after ${QUIET_WAIT}s: started anyway)" | tee -a "$OUT/run.log"
}

echo "host: $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg), quiet start below $QUIET" | tee "$OUT/host.txt"
for r in $(seq 1 "$ROUNDS"); do
  i=0
  for spec in "${PEERS[@]}"; do
    IFS='|' read -r label _ <<<"$spec"
    port=$((BASEPORT + i)); i=$((i + 1))
    wait_quiet
    one="$OUT/.run"
    rm -rf "$one"
    "$SHARED/compare.sh" -r 1 -o "$one" -P "$port" "$spec" -- "$@" >"$one.log" 2>&1 || true
    # compare.sh's "== round 1/1: LABEL ... load L" line, renumbered.
    sed -n "s|^== round 1/1: |== round $r/$ROUNDS: |p; /^   A2A-BENCH/p" "$one.log" | tee -a "$OUT/run.log"
    for f in "$one/$label".r1.*; do
      [ -e "$f" ] && mv "$f" "$OUT/$label.r$r.${f#"$one/$label".r1.}"
    done
  done
done
rm -rf "$OUT/.run" "$OUT/.run.log"
FILES=()  # in the order the peers were given, so the first peer is the reference
for spec in "${PEERS[@]}"; do
  IFS='|' read -r label _ <<<"$spec"
  for f in "$OUT/$label".r*.json; do [ -f "$f" ] && FILES+=("$f"); done
done
"$PY" "$SHARED/aggregate.py" --md "$OUT/summary.md" "${FILES[@]}"
