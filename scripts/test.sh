#!/usr/bin/env bash
# Run the test suite: `scripts/test.sh [pytest args...]`.
# Works on a fresh Debian 12 (as root): every setup step is idempotent and
# fast when already done. Exit status is pytest's; "no tests collected" (5)
# counts as a failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source scripts/lib.sh
ensure_packages
start_dockerd
build_test_image
start_postgres >/dev/null
ensure_venv
export GPUDOCK_TEST_PG_URL
rc=0
.venv/bin/python -m pytest "$@" || rc=$?
if [[ $rc == 5 ]]; then
    echo "scripts/test.sh: pytest collected no tests; treating that as a failure" >&2
    rc=1
fi
exit "$rc"
