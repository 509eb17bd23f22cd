#!/usr/bin/env bash
# Install the Debian services the tests use, where they are missing:
#   chromium       renders the HTML report headless (tests/report/)
#   postgresql-15  a shared Optuna study's storage (tune)
# A step of `make test`. With everything present it only looks at two paths and exits (a few
# ms). Missing and not root: one line saying what to run, and exit 0, so a developer's
# `make test` still runs and the tests that need a service skip (or fail with CI=true).
set -euo pipefail

# package, then the file whose presence means it is installed
declare -A WANTED=(
    [chromium]=/usr/bin/chromium
    [postgresql-15]=/usr/lib/postgresql/15/bin/postgres
)

missing=()
for package in "${!WANTED[@]}"; do
    [[ -x ${WANTED[$package]} ]] || missing+=("$package")
done
((${#missing[@]})) || exit 0
# Sorted, so the line reads the same on every run.
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort)

if ((EUID != 0)); then
    echo "test services missing: ${missing[*]} (as root: tools/install-test-services.sh," \
        "or apt-get install --no-install-recommends ${missing[*]})"
    exit 0
fi

echo "installing test services from Debian: ${missing[*]}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
    >"$log" 2>&1; then
    echo "apt-get failed installing ${missing[*]}; its last lines:" >&2
    tail -n 20 "$log" >&2
    exit 1
fi
