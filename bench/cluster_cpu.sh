#!/usr/bin/env bash
# Where the CPU of one scale-out SendMessage goes: start bench/cluster.py with N replicas behind its proxy, drive
# SendMessage at CLIENTS clients (default 16; ../shared/bench/a2a_bench.py, a warm-up, then DURATION seconds), and
# print the CPU per message of the replicas (all of them), PostgreSQL (every server process), Redis, the proxy, the
# load generator (a2a_bench's own "client CPU") and the whole machine (every CPU's busy time, kernel threads such as
# the filesystem journal's included), read from /proc, with the commits per message (pg_stat_database) and the times
# per message a replica was preempted (involuntary context switches: another process woken on its CPU). Used for
# bench/README.md's scale-out table of the CPU per message.
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
ticks() {  # utime + stime of each process, summed per class; the machine's busy time; replica preemptions
  {
    for p in $(pgrep -f "relaykit.cli serve .*--port $((PORT + 100))" ; pgrep -f "relaykit.cli serve .*--port $((PORT + 101))"); do
      echo "replicas $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0)"
      echo "preempted $(awk '/^nonvoluntary_ctxt_switches/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)"
    done
    for p in $(pgrep -x postgres); do echo "postgresql $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0)"; done
    echo "redis $(awk '{print $14+$15}' "/proc/$(pgrep -x redis-server | head -1)/stat")"
    echo "proxy $(awk '{print $14+$15}' "/proc/$launcher/stat")"
    # user nice system irq softirq steal: everything but idle and iowait
    echo "machine $(awk '/^cpu / {print $2+$3+$4+$7+$8+$9}' /proc/stat)"
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
    if name == "preempted":
        continue
    used = (float(after[name]) - float(before.get(name, 0))) / hz
    print(f"  {name}: {used / messages * 1e6:.0f} µs per message")
cores = metrics.get(f"send_c{sys.argv[4]}.client_cpu_cores")  # a2a_bench's own CPU over its timed phase
if cores is not None:
    print(f"  load generator: {cores / rate * 1e6:.0f} µs per message")
preempted = float(after.get("preempted", 0)) - float(before.get("preempted", 0))
print(f"  replicas preempted: {preempted / messages:.2f} times per message")
PY
