# shellcheck shell=bash
# Shared setup steps for .ci/run, scripts/test.sh and the demo.
#
# Source it, then call the steps you need. Every step is idempotent and fast
# when its work is already done, and returns non-zero (with a message on
# stderr) when it cannot do it:
#
#   ensure_packages [PKG...] apt-get install docker.io postgresql busybox-static
#                            prometheus chromium (promtool; browser tests)
#                            docker-registry apache2-utils (private registry tests)
#                            iproute2 iptables (the Swarm tests' 3-node swarm of private
#                            dockerds in network namespaces; nsenter is util-linux's)
#                            (or just the named packages) when missing
#   start_dockerd [--no-gpu-hook]
#                            dockerd without systemd; by default with the stand-in
#                            NVIDIA hook (tests/kit/fake_gpu_hook) on its PATH
#   build_test_image         gpudock-test/busybox:latest, built locally (no registry)
#   start_postgres           throwaway PostgreSQL on 127.0.0.1:55432, exports
#                            GPUDOCK_TEST_PG_URL
#   ensure_venv [dev]        .venv with `pip install -e .` (the demo: what gpudock needs to
#                            run), or `-e '.[dev]'` with `dev` (scripts/test.sh: pytest,
#                            Playwright, Schemathesis, ruff, mypy); the pure Python build
#                            (GPUDOCK_SETUP_VERBOSE=1: pip's progress on the terminal)
#   ensure_compiled_venv     .venv-compiled with `GPUDOCK_COMPILE=1 pip install '.[dev]'`
#                            (not editable: mypyc's .so files stay out of src/); installs
#                            gcc and python3-dev when missing
#
# Needs root for everything but ensure_venv. Works on a fresh Debian 12.

GPUDOCK_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GPUDOCK_HOOK_DIR="$GPUDOCK_REPO_ROOT/tests/kit/fake_gpu_hook"
GPUDOCK_DOCKER_SOCK="${GPUDOCK_DOCKER_SOCK:-/var/run/docker.sock}"
GPUDOCK_DOCKERD_LOG="${GPUDOCK_DOCKERD_LOG:-/tmp/gpudock-dockerd.log}"
GPUDOCK_FAKE_HOOK_LOG_PATH="${GPUDOCK_FAKE_HOOK_LOG_PATH:-/tmp/gpudock-fake-hook/hook.jsonl}"
GPUDOCK_TEST_IMAGE="${GPUDOCK_TEST_IMAGE:-gpudock-test/busybox:latest}"
GPUDOCK_PG_DIR="${GPUDOCK_PG_DIR:-/tmp/gpudock-pg}"
GPUDOCK_PG_PORT="${GPUDOCK_PG_PORT:-55432}"

_gpudock_log() { echo "[gpudock-setup] $*" >&2; }

_gpudock_pkg_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

ensure_packages() {  # [PKG...]; default: everything the test suite needs
    local pkg missing=() wanted=("$@")
    ((${#wanted[@]})) || wanted=(docker.io postgresql busybox-static prometheus chromium
        docker-registry apache2-utils iproute2 iptables)
    for pkg in "${wanted[@]}"; do
        _gpudock_pkg_installed "$pkg" || missing+=("$pkg")
    done
    if ((${#missing[@]} == 0)); then
        return 0
    fi
    _gpudock_log "installing ${missing[*]}"
    apt-get update -qq || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null || return 1
}

# Succeeds when the Docker socket answers GET /_ping with OK.
_gpudock_docker_ping() {
    [[ -S "$GPUDOCK_DOCKER_SOCK" ]] || return 1
    if command -v curl >/dev/null 2>&1; then
        [[ "$(curl -sf --max-time 2 --unix-socket "$GPUDOCK_DOCKER_SOCK" http://d/_ping)" == "OK" ]]
        return
    fi
    python3 - "$GPUDOCK_DOCKER_SOCK" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(2)
try:
    s.connect(sys.argv[1])
    s.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
    data = b""
    while chunk := s.recv(4096):
        data += chunk
except OSError:
    sys.exit(1)
sys.exit(0 if data.startswith(b"HTTP/1.") and b" 200 " in data.split(b"\r\n")[0] else 1)
PY
}

# Prints "yes" if the running dockerd was started with the stand-in hook, else "no".
_gpudock_dockerd_has_hook() {
    local pid
    pid="$(cat /var/run/docker.pid 2>/dev/null || pgrep -xo dockerd || true)"
    if [[ -n "$pid" && -r "/proc/$pid/environ" ]] &&
        tr '\0' '\n' <"/proc/$pid/environ" | grep -qE '^GPUDOCK_FAKE_HOOK_LOG=|^PATH=.*fake_gpu_hook'; then
        echo yes
    else
        echo no
    fi
}

start_dockerd() {
    local with_hook=1
    case "${1:-}" in
        "") ;;
        --no-gpu-hook) with_hook=0 ;;
        *) _gpudock_log "start_dockerd: unknown option $1"; return 2 ;;
    esac
    if _gpudock_docker_ping; then
        local has
        has="$(_gpudock_dockerd_has_hook)"
        _gpudock_log "dockerd already running (stand-in GPU hook: $has)"
        if [[ $with_hook == 1 && $has == no ]]; then
            _gpudock_log "warning: GPU device-request tests need dockerd started by start_dockerd (with the hook)"
        fi
        return 0
    fi
    command -v dockerd >/dev/null || { _gpudock_log "dockerd is not installed"; return 1; }
    if [[ $with_hook == 1 ]]; then
        chmod +x "$GPUDOCK_HOOK_DIR/nvidia-container-runtime-hook"
        mkdir -p "$(dirname "$GPUDOCK_FAKE_HOOK_LOG_PATH")"
        _gpudock_log "starting dockerd with the stand-in GPU hook ($GPUDOCK_HOOK_DIR)"
        # System directories first, so the hook's `env python3` finds Debian's
        # python3 (fast) rather than a slow version-manager shim.
        PATH="$GPUDOCK_HOOK_DIR:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH" \
            GPUDOCK_FAKE_HOOK_LOG="$GPUDOCK_FAKE_HOOK_LOG_PATH" \
            setsid nohup dockerd >"$GPUDOCK_DOCKERD_LOG" 2>&1 </dev/null &
    else
        _gpudock_log "starting plain dockerd (no GPU hook)"
        env -u GPUDOCK_FAKE_HOOK_LOG PATH="$(_gpudock_path_without_hook)" \
            setsid nohup dockerd >"$GPUDOCK_DOCKERD_LOG" 2>&1 </dev/null &
    fi
    disown || true
    local i
    for ((i = 0; i < 300; i++)); do
        _gpudock_docker_ping && { _gpudock_log "dockerd is up"; return 0; }
        sleep 0.1
    done
    _gpudock_log "dockerd did not answer within 30 s; last log lines:"
    tail -n 20 "$GPUDOCK_DOCKERD_LOG" >&2
    return 1
}

_gpudock_path_without_hook() {
    local out="" dir
    local IFS=:
    for dir in $PATH; do
        [[ "$dir" == *fake_gpu_hook* ]] || out="${out:+$out:}$dir"
    done
    echo "$out"
}

build_test_image() {
    if docker image inspect "$GPUDOCK_TEST_IMAGE" >/dev/null 2>&1; then
        return 0
    fi
    local busybox root
    busybox="$(command -v busybox || true)"
    if [[ -z "$busybox" ]] || ! _gpudock_pkg_installed busybox-static; then
        _gpudock_log "a static busybox is needed (apt-get install busybox-static)"
        return 1
    fi
    root="$(mktemp -d /tmp/gpudock-image.XXXXXX)"
    mkdir -p "$root/bin" "$root/tmp" "$root/proc" "$root/sys" "$root/dev" "$root/etc"
    cp "$busybox" "$root/bin/busybox"
    chroot "$root" /bin/busybox --install -s /bin || { rm -rf "$root"; return 1; }
    echo "root:x:0:0:root:/root:/bin/sh" >"$root/etc/passwd"
    echo "root:x:0:" >"$root/etc/group"
    _gpudock_log "building $GPUDOCK_TEST_IMAGE"
    local rc=0
    tar -C "$root" -c . | docker import -c 'CMD ["/bin/sh"]' - "$GPUDOCK_TEST_IMAGE" >/dev/null ||
        rc=$?
    rm -rf "$root"
    return "$rc"
}

_gpudock_pg_bin() {
    local bin
    bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    [[ -n "$bin" ]] || { _gpudock_log "PostgreSQL is not installed"; return 1; }
    echo "$bin"
}

start_postgres() {
    local bin
    bin="$(_gpudock_pg_bin)" || return 1
    export GPUDOCK_TEST_PG_URL="postgresql+psycopg://postgres@127.0.0.1:$GPUDOCK_PG_PORT/postgres"
    if "$bin/pg_isready" -q -h 127.0.0.1 -p "$GPUDOCK_PG_PORT" -t 2; then
        echo "GPUDOCK_TEST_PG_URL=$GPUDOCK_TEST_PG_URL"
        return 0
    fi
    mkdir -p "$GPUDOCK_PG_DIR"
    chown postgres:postgres "$GPUDOCK_PG_DIR"
    chmod 700 "$GPUDOCK_PG_DIR"
    if [[ ! -f "$GPUDOCK_PG_DIR/PG_VERSION" ]]; then
        runuser -u postgres -- "$bin/initdb" -D "$GPUDOCK_PG_DIR" -A trust -U postgres \
            --no-sync >/dev/null || return 1
    fi
    runuser -u postgres -- "$bin/pg_ctl" -D "$GPUDOCK_PG_DIR" -l "$GPUDOCK_PG_DIR/server.log" \
        -o "-p $GPUDOCK_PG_PORT -k $GPUDOCK_PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off" \
        -w start >/dev/null || { tail -n 20 "$GPUDOCK_PG_DIR/server.log" >&2; return 1; }
    echo "GPUDOCK_TEST_PG_URL=$GPUDOCK_TEST_PG_URL"
}

ensure_venv() {  # [dev]: with the dev extras (tests, linters, mypy); default: gpudock alone
    local venv="$GPUDOCK_REPO_ROOT/.venv" extra="${1:-}" target="."
    local stamp="$venv/.gpudock-installed${extra:+-$extra}"
    local dev_stamp="$venv/.gpudock-installed-dev"
    local pyproject="$GPUDOCK_REPO_ROOT/pyproject.toml"
    [[ -n $extra ]] && target=".[$extra]"
    if [[ -x "$venv/bin/gpudock" ]]; then  # a dev install serves the demo too
        for found in "$stamp" "$dev_stamp"; do
            if [[ -f "$found" && "$pyproject" -ot "$found" ]]; then
                return 0
            fi
        done
    fi
    if [[ ! -x "$venv/bin/python" ]]; then
        if ! python3 -c 'import ensurepip' 2>/dev/null; then
            _gpudock_log "installing python3-venv"
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                python3-venv >/dev/null || return 1
        fi
        _gpudock_log "creating $venv"
        python3 -m venv "$venv" || return 1
    fi
    _gpudock_log "installing gpudock${extra:+ and its $extra extras} into $venv"
    if [[ -n "${GPUDOCK_SETUP_VERBOSE:-}" ]]; then  # the demo: pip's own progress, live
        (cd "$GPUDOCK_REPO_ROOT" && GPUDOCK_COMPILE=0 "$venv/bin/python" -m pip install -e "$target") || return 1
        touch "$stamp"
        return 0
    fi
    local log=/tmp/gpudock-pip-install.log
    if ! (cd "$GPUDOCK_REPO_ROOT" && GPUDOCK_COMPILE=0 "$venv/bin/python" -m pip install -q \
        -e "$target") >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        return 1
    fi
    touch "$stamp"
}

# A digest of what a build is made from: the package's files and the build's own.
_gpudock_source_digest() {
    (cd "$GPUDOCK_REPO_ROOT" &&
        find src -type f ! -path '*/__pycache__/*' ! -name '*.so' ! -name '_native.json' \
            ! -path '*.egg-info/*' -print0 | sort -z | xargs -0 sha256sum &&
        sha256sum pyproject.toml setup.py _build_backend/*.py) | sha256sum | cut -d' ' -f1
}

ensure_compiled_venv() {
    local venv="$GPUDOCK_REPO_ROOT/.venv-compiled"
    local stamp="$venv/.gpudock-compiled" digest
    digest="$(_gpudock_source_digest)"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$digest" ]]; then
        return 0
    fi
    ensure_packages gcc python3-dev || return 1
    if [[ ! -x "$venv/bin/python" ]]; then
        _gpudock_log "creating $venv"
        python3 -m venv "$venv" || return 1
    fi
    _gpudock_log "compiling gpudock (GPUDOCK_COMPILE=1, mypyc: a few minutes) into $venv"
    local log=/tmp/gpudock-pip-install-compiled.log rc=0
    rm -rf "$GPUDOCK_REPO_ROOT/build"  # setuptools' staging folder: no stale module in the wheel
    (cd "$GPUDOCK_REPO_ROOT" && "$venv/bin/python" -m pip uninstall -q -y gpudock &&
        GPUDOCK_COMPILE=1 "$venv/bin/python" -m pip install -q '.[dev]') >"$log" 2>&1 || rc=$?
    rm -rf "$GPUDOCK_REPO_ROOT/build"
    if ((rc != 0)); then
        tail -n 30 "$log" >&2
        return 1
    fi
    echo "$digest" >"$stamp"
}
