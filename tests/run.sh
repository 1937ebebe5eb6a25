#!/usr/bin/env bash
# The test command, from a fresh clone: sets itself up, then runs the whole suite.
#
#   bash tests/run.sh [pytest arguments]
#
# 1. A virtual environment in .venv (MOE_HARNESS_VENV names another) with the project and every
#    extra the suite needs, pinned by .ci/constraints.txt (torch's CPU build). Re-running reuses it.
# 2. The real Prometheus, Pushgateway and promtool for the metrics tests: the Debian packages
#    `prometheus prometheus-pushgateway`, installed with apt-get when missing and this user may
#    (root, or sudo without a password). Elsewhere, point MOE_HARNESS_PROMETHEUS_BIN,
#    MOE_HARNESS_PUSHGATEWAY_BIN and MOE_HARNESS_PROMTOOL_BIN at existing binaries; without either,
#    the metrics tests fail saying so.
# 3. A real browser for the page tests (tests/test_view_page.py): Debian's `chromium` (with
#    `fonts-wqy-zenhei`, so the page's Chinese shows in the kept screenshots), installed the same way;
#    elsewhere point MOE_HARNESS_CHROMIUM_BIN at a Chromium binary; without either, those tests fail
#    saying so. As root, Debian's `slurmctld slurmd slurm-client munge` too: the SLURM script's test
#    then runs it on a real two-node SLURM of this machine (else through srun/scontrol stand-ins).
# 4. pytest. The public real traces are read from where tests/real_traces.py looks (../shared/traces/real,
#    $MOE_HARNESS_REAL_TRACES, or the cache `python tests/real_traces.py fetch` fills); missing ones
#    skip with one summary line saying how to get them, or fail with MOE_HARNESS_REQUIRE_REAL_TRACES=1.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${MOE_HARNESS_VENV:-.venv}"
say() { printf 'tests/run.sh: %s\n' "$*" >&2; }

have_prometheus() {
  for pair in "MOE_HARNESS_PROMETHEUS_BIN prometheus" "MOE_HARNESS_PUSHGATEWAY_BIN prometheus-pushgateway" \
              "MOE_HARNESS_PROMTOOL_BIN promtool"; do
    set -- $pair
    command -v "${!1:-$2}" >/dev/null || return 1
  done
}

if ! have_prometheus; then
  if [ "$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo="none"; fi
  if [ "$sudo" != none ] && command -v apt-get >/dev/null; then
    say "installing the Debian packages prometheus prometheus-pushgateway"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq prometheus prometheus-pushgateway >/dev/null
  else
    say "prometheus, prometheus-pushgateway or promtool missing and apt-get not usable here: the metrics tests" \
        "will fail; install them, or set MOE_HARNESS_PROMETHEUS_BIN / _PUSHGATEWAY_BIN / _PROMTOOL_BIN"
  fi
fi

if ! command -v "${MOE_HARNESS_CHROMIUM_BIN:-chromium}" >/dev/null; then
  if [ "$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo="none"; fi
  if [ "$sudo" != none ] && command -v apt-get >/dev/null; then
    say "installing the Debian packages chromium fonts-wqy-zenhei (the page tests' browser)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium fonts-wqy-zenhei >/dev/null
  else
    say "chromium missing and apt-get not usable here: the page tests will fail; install Debian's chromium," \
        "or set MOE_HARNESS_CHROMIUM_BIN to a Chromium binary"
  fi
fi

# A real SLURM for the sbatch script's test (one slurmctld and two slurmd on this machine, as root);
# without it that test runs the script through srun/scontrol stand-ins instead.
if [ "$(id -u)" = 0 ] && ! command -v slurmctld >/dev/null && command -v apt-get >/dev/null; then
  say "installing the Debian packages slurmctld slurmd slurm-client munge (the SLURM script's test)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null \
    || say "SLURM could not be installed: its test runs the script through stand-ins"
fi

if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv"
  python3 -m venv "$venv"
fi
say "installing the project with its test extras into $venv (pinned by .ci/constraints.txt)"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -c .ci/constraints.txt -e '.[test,embedded,ray,metrics,report,pd]'

exec "$venv/bin/python" -m pytest -q "$@"
