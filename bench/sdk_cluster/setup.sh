#!/usr/bin/env bash
# Builds the venv the a2a-sdk cluster-mode peer runs in (bench/sdk_cluster/): a2a-sdk 1.3.0 with the extras its
# `a2a.server.cluster` PostgreSQL stores need (SQLAlchemy asyncio + asyncpg) and its HTTP server routes, on
# uvicorn[standard] like every other server in the shared harness (../shared/bench/peers/setup.sh).
# usage: bench/sdk_cluster/setup.sh [VENV_DIR]   (default: $RELAYKIT_BENCH_HOME/venv-sdk-cluster,
#        RELAYKIT_BENCH_HOME defaults to ~/.cache/relaykit-bench)
set -euo pipefail
dir=${1:-${RELAYKIT_BENCH_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/relaykit-bench}/venv-sdk-cluster}
PY=${PYTHON:-python3}
A2A_SDK_VERSION=${A2A_SDK_VERSION:-1.3.0}
[ -x "$dir/bin/python" ] || "$PY" -m venv "$dir"
"$dir/bin/pip" install -q "a2a-sdk[postgresql,http-server]==$A2A_SDK_VERSION" "uvicorn[standard]"
echo "== $dir: $("$dir/bin/python" -V)"
"$dir/bin/pip" list 2>/dev/null | grep -iE '^(a2a-sdk|sqlalchemy|asyncpg|starlette|uvicorn|uvloop|httptools|protobuf) ' || true
