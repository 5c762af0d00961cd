#!/usr/bin/env bash
# The main job on the embedded default, from nothing: `scripts/demo.sh`.
#
# Sets up what is missing (Docker engine, a local busybox image, the venv),
# starts `gpudock server` on SQLite with the local Docker socket (emulating
# 4 H100s when this host has no NVIDIA GPU), submits a handful of GPU jobs,
# and shows them queue, get their GPUs, run and finish. Needs root on a
# fresh Debian/Ubuntu only for installing and starting Docker.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source scripts/lib.sh

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "setting up (Docker engine, demo image, Python venv)"
if ! _gpudock_docker_ping; then
    ensure_packages docker.io busybox-static
    start_dockerd --no-gpu-hook  # like a user's host without the NVIDIA toolkit
fi
ensure_packages busybox-static gcc python3-dev  # gcc and headers: the compiled scheduler (setup.py)
build_test_image
ensure_venv
export PATH="$PWD/.venv/bin:$PATH"

export GPUDOCK_HOME="${GPUDOCK_HOME:-$PWD/.gpudock-demo}"
PORT="${GPUDOCK_DEMO_PORT:-8470}"
export GPUDOCK_URL="http://127.0.0.1:$PORT"
rm -rf "$GPUDOCK_HOME"
mkdir -p "$GPUDOCK_HOME"
emulate=()
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    emulate=(--emulate-gpus 4xH100-80GB)
fi
step "starting: gpudock server --port $PORT ${emulate[*]}"
gpudock server --port "$PORT" "${emulate[@]}" >"$GPUDOCK_HOME/server.log" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null; wait $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    curl -sf "$GPUDOCK_URL/healthz" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$GPUDOCK_HOME/server.log"; exit 1; }
    sleep 0.1
done
grep -E "emulating|NVML|admin token" -A1 "$GPUDOCK_HOME/server.log" || true

step "gpudock gpus"
gpudock gpus

IMG=gpudock-test/busybox:latest
TRAIN='echo "epoch 1 on $NVIDIA_VISIBLE_DEVICES"; sleep 4; echo "epoch 2"; sleep 4; echo done'
step "submitting jobs"
set -x
gpudock submit --name train-a --gpus 2 "$IMG" -- sh -c "$TRAIN"
gpudock submit --name train-b --gpus 2 --priority 5 "$IMG" -- sh -c "$TRAIN"
gpudock submit --name big --gpus 4 "$IMG" -- sh -c 'echo "all four: $NVIDIA_VISIBLE_DEVICES"'
gpudock submit --name notebook-1 --gpus 1 --gpu-memory 20GiB "$IMG" -- sh -c 'sleep 3; echo share $GPUDOCK_GPU_MEMORY_MB MiB'
gpudock submit --name notebook-2 --gpus 1 --gpu-memory 20GiB "$IMG" -- sh -c 'sleep 3; echo share $GPUDOCK_GPU_MEMORY_MB MiB'
gpudock submit --name too-big --gpus 16 "$IMG" || true
set +x

step "watching the queue (gpudock jobs)"
for _ in $(seq 40); do
    gpudock jobs
    if ! gpudock jobs -o json | grep -qE '"state": "(PENDING|ALLOCATED|STARTING|RUNNING)"'; then
        break
    fi
    sleep 2
    echo
done

step "gpudock show 3   (waited for GPUs, then ran)"
gpudock show 3
step "gpudock logs 1"
gpudock logs 1
step "server log (note the one-line notices)"
grep -vE "DEBUG|Uvicorn|Started server|Waiting for|startup complete|alembic" "$GPUDOCK_HOME/server.log" | tail -n 15
step "done: the server stops now; run it yourself with: gpudock server --emulate-gpus 4xH100-80GB"
