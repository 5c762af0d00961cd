#!/usr/bin/env bash
# What gpudock does that `docker run --gpus` does not, in about two minutes: `scripts/demo.sh`.
#
# Sets up what is missing (Docker engine, a local busybox image, a venv with
# gpudock alone: the test tooling is scripts/test.sh's),
# starts `gpudock server` on SQLite with the local Docker socket (emulating
# 4 H100s when this host has no NVIDIA GPU) and a priority class `urgent` that
# may preempt, then shows, in order: the GPUs; two jobs sharing one GPU by
# memory; a job PENDING with its reason; an urgent job preempting a
# preemptible one, which is requeued; `gpudock why`; and the finished jobs.
# Every step says what it waits for. Needs root on a fresh Debian/Ubuntu only
# for installing and starting Docker.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source scripts/lib.sh

T0=$SECONDS
step() { printf '\n\033[1m==> %s\033[0m  (%ds)\n' "$*" "$((SECONDS - T0))"; }
note() { printf '\033[36m    %s\033[0m\n' "$*"; }   # what to notice
show() { printf '\033[2m$ %s\033[0m\n' "$*"; "$@"; }

step "setting up: Docker engine, demo image, Python venv"
if ! _gpudock_docker_ping; then
    echo "    installing and starting Docker (apt-get; about 30 s)"
    ensure_packages docker.io busybox-static
    start_dockerd --no-gpu-hook  # like a user's host without the NVIDIA toolkit
fi
ensure_packages busybox-static
build_test_image
if [[ ! -x .venv/bin/gpudock ]]; then
    echo "    installing gpudock into .venv (pip prints its progress; a minute or two)"
fi
GPUDOCK_SETUP_VERBOSE=1 ensure_venv
export PATH="$PWD/.venv/bin:$PATH"

export GPUDOCK_HOME="${GPUDOCK_HOME:-$PWD/.gpudock-demo}"
PORT="${GPUDOCK_DEMO_PORT:-8470}"
export GPUDOCK_URL="http://127.0.0.1:$PORT"
rm -rf "$GPUDOCK_HOME"
mkdir -p "$GPUDOCK_HOME"
cat >"$GPUDOCK_HOME/server.yaml" <<'YAML'
schedule_interval: 1s
reconcile_interval: 0.5s
executor:
  stop_grace: 2s
job_defaults:
  cpus: 0.25          # the demo's jobs are sleeps: a quarter core each, so a small host runs them all
scheduler:
  priority_classes:
    - name: urgent
      value: 100
      preempt: true       # may stop running, preemptible, lower-priority jobs
      description: on-call fixes that cannot wait
YAML
emulate=()
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    emulate=(--emulate-gpus 4xH100-80GB)
fi
step "starting: gpudock server --port $PORT --config server.yaml ${emulate[*]}"
gpudock server --port "$PORT" --config "$GPUDOCK_HOME/server.yaml" "${emulate[@]}" \
    >"$GPUDOCK_HOME/server.log" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null; wait $server_pid 2>/dev/null || true' EXIT
for i in $(seq 600); do
    curl -sf "$GPUDOCK_URL/healthz" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$GPUDOCK_HOME/server.log"; exit 1; }
    ((i % 50 == 0)) && echo "    still starting ($((i / 10)) s)"
    sleep 0.1
done
echo "    (its log: $GPUDOCK_HOME/server.log; the admin token is in $GPUDOCK_HOME/client.json)"

# state JOB: the job's state; wait_for JOB STATE... : poll, saying what it waits for.
state() { gpudock show "$1" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }
wait_for() {
    local job=$1 start=$SECONDS now last=""
    shift
    while :; do
        now="$(state "$job")"
        for want in "$@"; do [[ $now == "$want" ]] && return 0; done
        if [[ $now != "$last" ]] || (((SECONDS - start) % 15 == 0)); then
            echo "    waiting for job $job to be ${*// / or } (now $now, $((SECONDS - start)) s)"
            last=$now
        fi
        sleep 1
    done
}
submit() { printf '\033[2m$ gpudock submit %s\033[0m\n' "$*" >&2; gpudock submit "$@"; }

IMG=gpudock-test/busybox:latest

step "1. the GPUs"
show gpudock gpus
note "4 GPUs, all free (HELD BY '-'); emulated H100s when this host has none, real ones via NVML"

step "2. two jobs share one GPU by memory"
nb1=$(submit --name notebook-a --gpus 1 --gpu-memory 30GiB "$IMG" -- \
    sh -c 'echo "notebook-a on $NVIDIA_VISIBLE_DEVICES with $GPUDOCK_GPU_MEMORY_MB MiB"; sleep 15')
nb2=$(submit --name notebook-b --gpus 1 --gpu-memory 30GiB "$IMG" -- \
    sh -c 'echo "notebook-b on $NVIDIA_VISIBLE_DEVICES with $GPUDOCK_GPU_MEMORY_MB MiB"; sleep 15')
wait_for "$nb1" RUNNING
wait_for "$nb2" RUNNING
show gpudock gpus
note "one GPU is HELD BY '2 shared': 30GiB + 30GiB of its 80GiB; the other three stay whole for big jobs"

step "3. a job that cannot fit now waits as PENDING, with its reason"
big=$(submit --name train-4gpu --gpus 4 "$IMG" -- sh -c 'echo "all four: $NVIDIA_VISIBLE_DEVICES"; sleep 3')
wait_for "$big" PENDING
sleep 2  # one scheduling cycle, which writes the reason
show gpudock jobs
note "train-4gpu is PENDING and NOTE says why (the notebooks hold a GPU); it starts by itself when they end"
wait_for "$big" SUCCEEDED

step "4. an urgent job preempts a preemptible one, which is requeued"
sweep=$(submit --name sweep --gpus 4 "$IMG" -- sh -c 'echo "sweep starts (again after a preemption)"; sleep 20')
wait_for "$sweep" RUNNING
urgent=$(submit --name hotfix --gpus 2 --priority-class urgent "$IMG" -- sh -c 'echo hotfix; sleep 5')
wait_for "$urgent" RUNNING
show gpudock jobs
note "hotfix (class 'urgent', preempt: true) took the GPUs; sweep went back to PENDING, not FAILED"

step "5. gpudock why: why is a job not running?"
show gpudock why "$sweep"
note "each reason says what would change it; all 4 GPUs are reserved for sweep, so nothing smaller jumps ahead ('gpudock show $sweep': its history)"

step "6. everything finishes (sweep restarts once hotfix is done)"
wait_for "$sweep" SUCCEEDED
show gpudock jobs
note "every job SUCCEEDED; sweep ran twice (ATTEMPT in 'gpudock show $sweep'); a user's raw --priority never preempts"
show gpudock logs "$sweep"

step "done in $((SECONDS - T0)) s: the server stops now; run it yourself with: gpudock server --emulate-gpus 4xH100-80GB"
