#!/usr/bin/env bash
# The full suite as `./dev test` (and CI) runs it: two pytest processes side by side.
#   integration  tests/integration at normal priority (the Kubernetes modules last:
#                conftest.py), printing as it goes
#   unit         tests/unit at nice 10 (as the background Go build), on the CPU the integration
#                tests leave idle while they wait on brokers, Spark batches and pods. Not nice
#                19: a few unit tests wait seconds on a subprocess and would starve. It prints a
#                one-line result when it ends and its whole output after the integration lane's.
#   side         the local modules that leave the CPU idle (SIDE below), with a session broker
#                of their own, at nice 10 too: the Spark modules (a Spark driver plans and
#                commits each micro-batch on one thread, so alone they leave a core idle) and
#                the modules that mostly wait on a broker, a registry or a Prometheus. The
#                integration lane leaves a core idle too while it waits on pods. Printed like
#                the unit lane. Kept out: modules with their own clusters to kill, fill or roll
#                on a clock (failover, full disk, TLS reload, takeover, scaling), group session
#                timeouts (consumer protocol), a server's bounded restart (PostgreSQL sink).
#                The local platform runs last in it: it brings up its own broker, jobs and
#                Prometheus (in a home of its own) and waits for conditions, not clocks, and
#                at nice 10 beside the Kubernetes modules it takes the core they leave idle
#                (the integration lane's Kubernetes half ran at 1.1 cores, docs/testing.md).
# The Kubernetes modules do not get a lane of their own: both halves use more than a core on
# average, and side by side (measured, docs/testing.md) the load reached 47 and a restarted
# broker pod could not register with its quorum in time. The exit code is the worse lane's.
# Each lane runs in a cpuacct cgroup of its own (when the machine lets us make one), so its
# profile (tests/suite_profile.py) counts the CPU of everything it started. HANZO_STREAM_COVERAGE=1
# also measures the production code's line coverage, in every Python process the suite starts
# (bench/suite_profile.py --coverage).
set -uo pipefail
cd "$(dirname "$0")/.."
logs="$(mktemp -d -t hanzo-lanes.XXXXXX)"
cgroups=()
cleanup() {  # the machine as it was: every lane cgroup emptied into its parent, then removed
  for g in ${cgroups[@]+"${cgroups[@]}"}; do
    [ -d "$g" ] || continue
    while read -r pid; do echo "$pid" >/sys/fs/cgroup/cpuacct/cgroup.procs 2>/dev/null; done <"$g/cgroup.procs"
    rmdir "$g" 2>/dev/null
  done
  rm -rf "$logs"
}
trap cleanup EXIT
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

for name in integration unit side; do  # made here, so that cleanup sees them
  mkdir "/sys/fs/cgroup/cpuacct/hanzo-lane-$name-$$" 2>/dev/null &&
    cgroups+=("/sys/fs/cgroup/cpuacct/hanzo-lane-$name-$$")
done
lane() {  # NAME NICE PYTEST-ARGS...: one pytest process, in its lane's cgroup (in a subshell)
  local name=$1 niceness=$2; shift 2
  local g="/sys/fs/cgroup/cpuacct/hanzo-lane-$name-$$"
  { [ -d "$g" ] && echo "$BASHPID" >"$g/cgroup.procs"; } 2>/dev/null || g=""
  HANZO_STREAM_LANE=$name HANZO_STREAM_LANE_CGROUP=$g nice -n "$niceness" \
    "${py[@]}" -m pytest -q -p no:cacheprovider "$@"
}
background() {  # NAME NICE PYTEST-ARGS...: a lane logged to a file
  local name=$1
  (
    lane "$@" >"$logs/$name.log" 2>&1
    code=$?
    echo; echo "[$name lane, exit $code] $(tail -n 1 "$logs/$name.log")"  # seen even if CI cuts the run off later
    exit $code
  ) &
}
# In the order the integration lane ran them before (event dates rise through a session broker),
# then the local platform (a broker of its own).
SIDE=()
for m in acl_enforcement acl_matrix authentication client_produce clock_skew contract_parity \
         dead_letter_alerting dead_letter_replay llm_metrics_live local_apply monitoring_live \
         reconciler schema_registry spark_jobs local_platform; do
  SIDE+=("tests/integration/test_$m.py")
done
rm -f .hanzo-stream/suite-profile/parts-*.json  # this run's parts only (tests/suite_profile.py)
background unit 10 --durations=10 tests/unit
unit_pid=$!
background side 10 --durations=15 "${SIDE[@]}"
side_pid=$!
(lane integration 0 --durations=30 "${SIDE[@]/#/--ignore=}" tests/integration)
integration_code=$?
wait "$unit_pid"; unit_code=$?
wait "$side_pid"; side_code=$?
for name in unit side; do
  echo
  echo "==================== the $name lane (run beside the integration tests) ===================="
  cat "$logs/$name.log"
done
echo "==> integration lane: exit $integration_code; unit lane: exit $unit_code; side lane: exit $side_code"
if [ "${HANZO_STREAM_COVERAGE:-}" = 1 ]; then
  build=(); [ -d .hanzo-stream/coverage-build ] && build=("$PWD/.hanzo-stream/coverage-build")  # .ci/install-kube.sh
  python -m coverage combine -q "$cov" ${build[@]+"${build[@]}"} && python -m coverage json -q -o "$cov/coverage.json" &&
    python -m coverage report --format=total | sed 's/^/==> production line coverage: /;s/$/%/'
fi
worst=$(( integration_code > unit_code ? integration_code : unit_code ))
exit $(( side_code > worst ? side_code : worst ))
