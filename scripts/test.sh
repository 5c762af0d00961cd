#!/usr/bin/env bash
# Run the gates and the test suite: `scripts/test.sh [pytest args...]`.
# Works on a fresh Debian 12 (as root): every setup step is idempotent and
# fast when already done.
#   1. gates, each failing the run on any finding: ruff check, ruff format --check,
#      mypy (strict, as pyproject.toml configures it);
#   2. pytest on the pure Python build (.venv), with the given args;
#   3. the compiled step, under CI=true or GPUDOCK_TEST_COMPILED=1 (GPUDOCK_TEST_COMPILED=0
#      leaves it out): a GPUDOCK_COMPILE=1 build (.venv-compiled, mypyc) runs the
#      compiled-equivalence tests (COMPILED_TESTS).
# Exit status: the first failing step's; "no tests collected" (5) counts as a failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source scripts/lib.sh
COMPILED_TESTS=(tests/unit/test_native.py tests/unit/scheduler)
LINTED=(src tests benchmarks scripts setup.py _build_backend)

gate() {  # NAME COMMAND...: run a gate; on a finding say which gate failed and stop
    local name="$1"
    shift
    echo "scripts/test.sh: gate: $name" >&2
    if ! "$@"; then
        echo "scripts/test.sh: FAILED gate '$name' ($*): fix the findings above" >&2
        exit 1
    fi
}

pytest_step() {  # NAME PYTHON ARGS...: pytest; 5 (nothing collected) fails too
    local name="$1" python="$2" rc=0
    shift 2
    "$python" -m pytest "$@" || rc=$?
    if [[ $rc == 5 ]]; then
        echo "scripts/test.sh: $name: pytest collected no tests; treating that as a failure" >&2
        rc=1
    fi
    if [[ $rc != 0 ]]; then
        echo "scripts/test.sh: FAILED $name (pytest exit $rc)" >&2
    fi
    return "$rc"
}

ensure_packages
start_dockerd
build_test_image
start_postgres >/dev/null
ensure_venv dev
export GPUDOCK_TEST_PG_URL

gate "ruff check" .venv/bin/ruff check "${LINTED[@]}"
gate "ruff format" .venv/bin/ruff format --check "${LINTED[@]}"
gate "mypy" .venv/bin/mypy

rc=0
pytest_step "tests (pure build)" .venv/bin/python "$@" || rc=$?

if [[ "${GPUDOCK_TEST_COMPILED:-$([[ "${CI:-}" == true ]] && echo 1 || echo 0)}" == 1 ]]; then
    echo "scripts/test.sh: compiled step: GPUDOCK_COMPILE=1 build, ${COMPILED_TESTS[*]}" >&2
    if ! ensure_compiled_venv; then
        echo "scripts/test.sh: FAILED compiled step: the GPUDOCK_COMPILE=1 build" >&2
        rc=1
    else
        # the installed (compiled) gpudock, not src/: pythonpath is the root only, for tests/
        GPUDOCK_EXPECT_COMPILED=1 pytest_step "compiled step" .venv-compiled/bin/python \
            -o pythonpath=. -p no:cacheprovider "${COMPILED_TESTS[@]}" || rc=1
    fi
fi
exit "$rc"
