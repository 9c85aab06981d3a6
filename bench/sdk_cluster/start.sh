#!/usr/bin/env bash
# usage: bench/sdk_cluster/start.sh PORT [--replicas N | --no-proxy] [--pg DSN] [--poll-interval S]
# execs the a2a-sdk cluster-mode launcher (cluster.py) in the venv of setup.sh, so $! is the launcher's PID.
here=$(cd "$(dirname "$0")" && pwd)
exec "${SDK_CLUSTER_PY:-${RELAYKIT_BENCH_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/relaykit-bench}/venv-sdk-cluster/bin/python}" \
  "$here/cluster.py" "${1:?port}" "${@:2}"
