#!/usr/bin/env bash
# The full suite as `./dev test` (and CI) runs it: two pytest processes side by side.
# The integration tests run at normal priority. The unit tests (CPU only, no service) run
# beside them at nice 10, as the background Go build does, on the CPU the integration tests
# leave idle while they wait on brokers, Spark batches and pods (a third of two cores,
# measured). Not nice 19: a few unit tests wait seconds on a subprocess and would starve.
# The unit lane's output follows the integration lane's; the exit code is the worse one.
set -uo pipefail
cd "$(dirname "$0")/.."
unit_log="$(mktemp -t hanzo-unit-lane.XXXXXX)"
trap 'rm -f "$unit_log"' EXIT
(
  nice -n 10 python -m pytest -q -p no:cacheprovider --durations=10 tests/unit >"$unit_log" 2>&1
  code=$?
  echo; echo "[unit lane, exit $code] $(tail -n 1 "$unit_log")"  # seen even if CI cuts the run off later
  exit $code
) &
unit_pid=$!
python -m pytest -q --durations=30 tests/integration
integration=$?
wait "$unit_pid"
unit=$?
echo
echo "==================== the unit lane (tests/unit, run beside the integration tests) ===================="
cat "$unit_log"
echo "==> integration lane: exit $integration; unit lane: exit $unit"
exit $(( integration > unit ? integration : unit ))
