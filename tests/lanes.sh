#!/usr/bin/env bash
# The full suite as `./dev test` (and CI) runs it: two pytest processes side by side.
# The integration tests run at normal priority. The unit tests (CPU only, no service) run
# beside them at nice 10, as the background Go build does, on the CPU the integration tests
# leave idle while they wait on brokers, Spark batches and pods (a third of two cores,
# measured). Not nice 19: a few unit tests wait seconds on a subprocess and would starve.
# The unit lane's output follows the integration lane's; the exit code is the worse one.
# Each lane writes its profile (tests/suite_profile.py); HANZO_STREAM_COVERAGE=1 also measures
# the production code's line coverage, in every Python process the suite starts
# (bench/suite_profile.py --coverage).
set -uo pipefail
cd "$(dirname "$0")/.."
unit_log="$(mktemp -t hanzo-unit-lane.XXXXXX)"
trap 'rm -f "$unit_log"' EXIT
py=(python)
if [ "${HANZO_STREAM_COVERAGE:-}" = 1 ]; then
  cov="$PWD/.hanzo-stream/coverage"
  rm -rf "$cov" && mkdir -p "$cov"
  # Absolute paths: the suite's processes start in many directories.
  cat >"$cov/coveragerc" <<RC
[run]
source = $PWD/hanzo_stream, $PWD/infra, $PWD/spark
parallel = true
patch = subprocess
sigterm = true
data_file = $cov/data
RC
  export COVERAGE_RCFILE="$cov/coveragerc"
  py=(python -m coverage run)
fi
(
  HANZO_STREAM_LANE=unit nice -n 10 "${py[@]}" -m pytest -q -p no:cacheprovider --durations=10 \
    tests/unit >"$unit_log" 2>&1
  code=$?
  echo; echo "[unit lane, exit $code] $(tail -n 1 "$unit_log")"  # seen even if CI cuts the run off later
  exit $code
) &
unit_pid=$!
HANZO_STREAM_LANE=integration "${py[@]}" -m pytest -q --durations=30 tests/integration
integration=$?
wait "$unit_pid"
unit=$?
echo
echo "==================== the unit lane (tests/unit, run beside the integration tests) ===================="
cat "$unit_log"
echo "==> integration lane: exit $integration; unit lane: exit $unit"
if [ "${HANZO_STREAM_COVERAGE:-}" = 1 ]; then
  python -m coverage combine -q && python -m coverage json -q -o "$cov/coverage.json" &&
    python -m coverage report --format=total | sed 's/^/==> production line coverage: /;s/$/%/'
fi
exit $(( integration > unit ? integration : unit ))
