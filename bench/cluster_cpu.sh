#!/usr/bin/env bash
# Where the CPU of one scale-out SendMessage goes: start bench/cluster.py with N replicas behind its proxy, drive
# SendMessage at CLIENTS clients (default 16; ../shared/bench/a2a_bench.py, a warm-up, then DURATION seconds), and
# print the CPU per message of the replicas (all of them), PostgreSQL (every server process), Redis and the proxy,
# read from /proc, with the commits per message (pg_stat_database). Used for bench/README.md's scale-out table of the
# CPU per message.
#
#     bench/cluster_cpu.sh 1; bench/cluster_cpu.sh 2; CLIENTS=8 bench/cluster_cpu.sh 1
set -euo pipefail
cd "$(dirname "$0")/.."
REPLICAS=${1:-1}
DURATION=${DURATION:-6}
CLIENTS=${CLIENTS:-16}
PORT=${PORT:-$((9700 + REPLICAS * 10))}
PG=${RELAYKIT_TEST_PG:-postgresql://postgres@127.0.0.1:5432/test}
SHARED=${SHARED:-../shared/bench}
python3 bench/cluster.py "$PORT" --replicas "$REPLICAS" --store "$PG" > "/tmp/cluster_cpu.$REPLICAS.log" 2>&1 &
launcher=$!
trap 'kill "$launcher" 2>/dev/null; wait "$launcher" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  grep -q "^cluster:" "/tmp/cluster_cpu.$REPLICAS.log" && break
  sleep 0.5
done
grep -q "^cluster:" "/tmp/cluster_cpu.$REPLICAS.log"
ticks() {  # utime + stime of each process, summed per class
  {
    for p in $(pgrep -f "relaykit.cli serve .*--port $((PORT + 100))" ; pgrep -f "relaykit.cli serve .*--port $((PORT + 101))"); do
      echo "replicas $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0)"
    done
    for p in $(pgrep -x postgres); do echo "postgresql $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0)"; done
    echo "redis $(awk '{print $14+$15}' "/proc/$(pgrep -x redis-server | head -1)/stat")"
    echo "proxy $(awk '{print $14+$15}' "/proc/$launcher/stat")"
  } | awk '{a[$1]+=$2} END {for (k in a) print k, a[k]}'
}
commits() { psql "$PG" -Atc "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }
python3 "$SHARED/a2a_bench.py" "http://127.0.0.1:$PORT/" --phases send --concurrency "$CLIENTS" --duration 2 --warmup 1 > /dev/null
before=$(ticks); c0=$(commits)
python3 "$SHARED/a2a_bench.py" "http://127.0.0.1:$PORT/" --phases send --concurrency "$CLIENTS" --duration "$DURATION" \
  --warmup 0 --out "/tmp/cluster_cpu.$REPLICAS.json" > /dev/null
after=$(ticks)
sleep 1.5  # PostgreSQL publishes its counters at most once a second
c1=$(commits)
BEFORE="$before" AFTER="$after" C0="$c0" C1="$c1" python3 - "/tmp/cluster_cpu.$REPLICAS.json" "$DURATION" "$REPLICAS" "$CLIENTS" <<'PY'
import json, os, sys
metrics = json.load(open(sys.argv[1]))["metrics"]
rate = metrics[f"send_c{sys.argv[4]}.rps"]
messages = rate * float(sys.argv[2])
before = dict(line.split() for line in os.environ["BEFORE"].splitlines())
after = dict(line.split() for line in os.environ["AFTER"].splitlines())
hz = os.sysconf("SC_CLK_TCK")
print(f"{sys.argv[3]} replica(s): {rate:.0f} req/s at {sys.argv[4]} clients, "
      f"{(int(os.environ['C1']) - int(os.environ['C0'])) / messages:.2f} commits per message")
for name in sorted(after):
    used = (float(after[name]) - float(before.get(name, 0))) / hz
    print(f"  {name}: {used / messages * 1e6:.0f} µs per message")
PY
