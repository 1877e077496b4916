"""The broker's container environment and entrypoint, rendered from `broker_config()`.

Why our own entrypoint: both images are used as Kafka distributions with their own
environment conventions (bitnami `KAFKA_CFG_*`, apache/kafka `KAFKA_*`), but bitnami's
entrypoint rewrites TLS and SASL settings on its own (it forces `ssl.client.auth` from
KAFKA_TLS_CLIENT_AUTH, inlines PEM keys that conflict with `ssl.keystore.location`, and
regenerates JAAS). A short POSIX script turns exactly the rendered variables back into
server.properties, so the broker runs what `broker_config()` returned and nothing else.

Per-pod values: every key that differs between pods (node.id and advertised.listeners)
and the pod's place in the dynamic controller quorum (the `kafka-storage format` flags,
`quorum_format_args`) are chosen in the script from the pod's ordinal
(`${HOSTNAME##*-}`); all the other keys are plain container environment variables,
identical for every pod.

Growing the quorum: pods with an ordinal at or above the number of founding controllers
format with `--no-initial-controllers` and start as observers; `join_script()` is the
sidecar that makes such a pod a voter (`kafka-metadata-quorum add-controller`, which must
run with the pod's own server.properties and data volume).

Why not the apache/kafka image's own entrypoint (/etc/kafka/docker/run): its `launch`
formats storage with static voters only (KafkaDockerWrapper refuses a quorum without
`controller.quorum.voters`), its `configure` demands JKS keystores and password files as
soon as a listener uses SSL, and `configureDefaults` exports PLAINTEXT defaults for every
key left unset. tests/unit/test_infra_apache_image.py runs that image's own env
conversion from the Kafka jars to prove the variables below mean what broker_config() says.
"""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hanzo_stream.core.broker_config import (
    BrokerSettings,
    broker_config,
    from_apache_env,
    from_bitnami_env,
    kraft_uuid,
    quorum_format_args,
    to_apache_env,
    to_bitnami_env,
)
from hanzo_stream.pods import takeover
from hanzo_stream.pods.quorum import MAX_LAG
from hanzo_stream.pods.roll_gate import EVERYONE_GOES

from .topology import PORTS, Topology

JAAS_SECRET, JAAS_KEY = "kafka-broker-jaas", "jaas.properties"
CLUSTER_ID_SECRET, CLUSTER_ID_KEY = "kafka-cluster-id", "cluster-id"
TLS_SECRET = "kafka-tls"
JAAS_ENV = "HANZO_KAFKA_JAAS"
# The JMX agent's -javaagent option: the entrypoint hands it to the broker's JVM only. In
# KAFKA_OPTS every Kafka tool run in the container (kubectl exec ... kafka-topics.sh) would
# load the agent too and die binding the metrics port the broker holds.
JMX_AGENT_ENV = "HANZO_JMX_AGENT_OPTS"
ADMIN_JAAS_ENV = "HANZO_ADMIN_JAAS"  # the join sidecar's client login, from the kafka-admin Secret
VOTER_MARKER = "voter"  # written by the join sidecar once this pod is a voter: its readiness
# The pod's copy of its node's zone (or region) label: the broker's `broker.rack`. The API
# server's PodTopologyLabels admission (Kubernetes 1.35+) puts the node's topology labels on the
# pod at binding, and the downward API hands the label to the container; an image or a
# rendering cannot know it beforehand.
RACK_ENV = "HANZO_BROKER_RACK"
# "true" once the stack's first `pulumi up` has formed the controller quorum (infra/quorum.py's
# ConfigMap, created after the brokers are ready; read when the container starts): from then
# on a blank volume never founds one.
FORMED_ENV = "HANZO_QUORUM_FORMED"
QUORUM_CONFIG_MAP, FORMED_KEY = "kafka-quorum", "formed"

# JVM and image variables that apache/kafka's own entrypoint does not treat as properties.
JVM_VARS = frozenset({"KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS", "KAFKA_LOG4J_OPTS",
                      "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS"})


@dataclass(frozen=True)
class Paths:
    """Where things live inside the broker container."""

    tls_dir: str = "/etc/kafka/tls"  # Secret: tls.crt, tls.key (PKCS#8), ca.crt
    run_dir: str = "/opt/hanzo/run"  # memory emptyDir: server.properties, keystore.pem
    data_dir: str = "/var/lib/kafka"  # the persistent volume
    jmx_dir: str = "/opt/hanzo/jmx"  # emptyDir filled by the init container
    jmx_rules_dir: str = "/opt/hanzo/jmx-rules"  # ConfigMap with the rules file
    join_dir: str = "/tmp"  # the join sidecar's memory emptyDir: its command config, marker
    gate_dir: str = "/gate"  # the roll gate's verdicts (hanzo_stream/pods/roll_gate.py), read-only

    @property
    def log_dirs(self) -> str:
        return f"{self.data_dir}/data"  # a sub-directory: the volume root holds lost+found

    @property
    def keystore(self) -> str:
        return f"{self.run_dir}/keystore.pem"

    @property
    def properties(self) -> str:
        return f"{self.run_dir}/server.properties"

    @property
    def truststore(self) -> str:
        return f"{self.tls_dir}/ca.crt"


@dataclass(frozen=True)
class Flavor:
    name: str
    kafka_home: str
    uid: int
    cluster_id_var: str
    to_env: Callable[[Mapping[str, str]], dict[str, str]]
    from_env: Callable[[Mapping[str, str]], dict[str, str]]
    sh_key: str  # shell pipeline: variable name on stdin -> property key on stdout


FLAVORS = {
    "bitnami": Flavor("bitnami", "/opt/bitnami/kafka", 1001, "KAFKA_KRAFT_CLUSTER_ID",
                      to_bitnami_env, from_bitnami_env,
                      "sed -e 's/^KAFKA_CFG_//' | tr 'A-Z_' 'a-z.'"),
    "apache": Flavor("apache", "/opt/kafka", 1000, "CLUSTER_ID", to_apache_env, from_apache_env,
                     "sed -e 's/^KAFKA_//' | tr 'A-Z' 'a-z' | sed -e 's/___/-/g' "
                     "-e 's/__/%/g' -e 's/_/./g' -e 's/%/_/g'"),
}


def broker_settings(top: Topology, ordinal: int, overrides: Mapping[str, str] = (),
                    paths: Paths = Paths()) -> BrokerSettings:
    """The settings of pod `ordinal`: the same dataclass the local cluster fills in."""
    return BrokerSettings(
        node_id=ordinal, nodes=top.nodes, log_dirs=paths.log_dirs,
        keystore_pem=paths.keystore, truststore_pem=paths.truststore,
        extra=tuple(sorted(dict(overrides).items())),
    )


def directory_id(top: Topology, ordinal: int) -> str:
    """The metadata log directory id pod `ordinal` formats with: a Kafka Uuid (base64url,
    16 bytes) derived from the pod's name, so every pod renders the same voter list."""
    host = top.pod_host(ordinal)
    return kraft_uuid(lambda n: uuid.uuid5(uuid.NAMESPACE_DNS, host + (f"#{n}" if n else "")).bytes)


def initial_voters(top: Topology, founders: int | None = None) -> dict[int, str]:
    """The controller quorum the stack was founded with: pods 0 .. founders-1 (default: every
    pod, a new stack). Pods above it were added later and must join, never found: formatting
    them as founders would let two empty voters outvote the one that holds the metadata."""
    n = top.brokers if founders is None else founders
    if not 1 <= n <= top.brokers or n == 2:
        raise ValueError(
            f"the controller quorum was founded with {n} pods but the stack has {top.brokers} "
            "brokers: a quorum is founded by 1 or 3+ pods and the program does not shrink it "
            "(see docs/runbooks/scaling-1-to-3.md; `initialControllers` overrides the record)")
    return {i: directory_id(top, i) for i in range(n)}


@dataclass(frozen=True)
class Rendered:
    """broker_config() for every pod, split into shared and per-pod keys."""

    order: tuple[str, ...]  # property keys in broker_config's order
    common: dict[str, str]
    per_pod: tuple[dict[str, str], ...]
    format_args: tuple[tuple[str, ...], ...]  # kafka-storage format flags of each pod
    switch: bool = False  # taking over a running cluster's volumes: never format one
    rack_label: str = ""  # the pod label whose value is broker.rack; "" none

    def pod_config(self, ordinal: int) -> dict[str, str]:
        merged = {**self.common, **self.per_pod[ordinal]}
        return {k: merged[k] for k in self.order}


def render(top: Topology, overrides: Mapping[str, str] = (), paths: Paths = Paths(),
           founders: int | None = None, switch: bool = False, legacy_port: int = 0,
           rack_label: str = "") -> Rendered:
    """broker_config() of every pod; `founders`: how many pods founded the quorum (None: all);
    `switch`: the pod takes over a running cluster's volume (takeover.switch_config, and the
    entrypoint never formats); `legacy_port`: the LEGACY PLAINTEXT listener's port, 0 none;
    `rack_label`: the topology label whose value (the node's) each broker takes as broker.rack."""
    pods = [broker_settings(top, i, overrides, paths) for i in range(top.brokers)]
    cfgs = [broker_config(s) for s in pods]
    if switch:
        cfgs = [takeover.switch_config(c, s) for c, s in zip(cfgs, pods, strict=True)]
    cfgs = [takeover.with_legacy(c, s, legacy_port) for c, s in zip(cfgs, pods, strict=True)]
    first = cfgs[0]
    varying = {"node.id", "advertised.listeners"} | {
        k for c in cfgs[1:] for k in first if c.get(k) != first[k]}
    common = {k: v for k, v in first.items() if k not in varying}
    per_pod = tuple({k: c[k] for k in first if k in varying} for c in cfgs)
    voters = initial_voters(top, founders)
    fmt = tuple(tuple(quorum_format_args(s, voters)) for s in pods)
    return Rendered(tuple(first), common, per_pod, fmt, switch, rack_label)


def container_env(flavor: Flavor, r: Rendered, heap_opts: str, jmx_opts: str,
                  java_options: str = "") -> list[dict]:
    """The broker container's env: shared properties as values, secrets by secretKeyRef."""
    env = [{"name": k, "value": v} for k, v in flavor.to_env(r.common).items()]
    env += [
        {"name": flavor.cluster_id_var,
         "valueFrom": {"secretKeyRef": {"name": CLUSTER_ID_SECRET, "key": CLUSTER_ID_KEY}}},
        {"name": JAAS_ENV, "valueFrom": {"secretKeyRef": {"name": JAAS_SECRET, "key": JAAS_KEY}}},
        {"name": "KAFKA_HEAP_OPTS", "value": heap_opts},
        {"name": JMX_AGENT_ENV, "value": jmx_opts},
        {"name": "LOG_DIR", "value": "/tmp/kafka-logs"},
        {"name": FORMED_ENV, "valueFrom": {"configMapKeyRef": {
            "name": QUORUM_CONFIG_MAP, "key": FORMED_KEY, "optional": True}}},
    ]
    if r.rack_label:
        env.append({"name": RACK_ENV, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.labels['{r.rack_label}']"}}})
    return env + java_opts_env(java_options)


def java_opts_env(java_options: str) -> list[dict]:
    """KAFKA_OPTS for a container's Kafka JVMs; none when empty, so a stack that never sets
    javaOptions renders the pods it always did (no roll)."""
    return [{"name": "KAFKA_OPTS", "value": java_options}] if java_options else []


def properties_from_env(flavor: Flavor, env: list[dict]) -> dict[str, str]:
    """Invert a container env back to properties, as the image convention reads it."""
    plain = {e["name"]: e["value"] for e in env if "value" in e and e["name"] not in JVM_VARS}
    return flavor.from_env(plain)


def _q(value: str) -> str:
    return shlex.quote(value)


def entrypoint(flavor: Flavor, top: Topology, r: Rendered, paths: Paths = Paths()) -> str:
    """The POSIX sh script the broker container runs (bash and busybox alike)."""
    var_of = {k: next(iter(flavor.to_env({k: ""}))) for k in r.order}
    cases = []
    for i, (pod, fmt) in enumerate(zip(r.per_pod, r.format_args, strict=True)):
        assigns = "; ".join(f"export {var_of[k]}={_q(v)}" for k, v in pod.items())
        cases.append(f"  {i}) {assigns}; set -- {' '.join(map(_q, fmt))} ;;")
    bin_ = f"{flavor.kafka_home}/bin"
    return "\n".join([
        "set -eu",
        "# Generated by infra/broker.py from broker_config(); every property Kafka reads is",
        "# listed here and comes from this container's environment.",
        'ordinal="${HOSTNAME##*-}"',
        'case "$ordinal" in',
        *cases,
        f'  *) echo "hanzo-stream: pod $HOSTNAME is not one of the {top.brokers} brokers" >&2;'
        " exit 64 ;;",
        "esac",
        "umask 077",
        f"cat {_q(paths.tls_dir + '/tls.key')} {_q(paths.tls_dir + '/tls.crt')}"
        f" > {_q(paths.keystore)}",
        f"conf={_q(paths.properties)}",
        ': > "$conf"',
        f"for var in {' '.join(var_of[k] for k in r.order)}; do",
        '  eval "value=\\${$var}"',
        f'  key=$(printf %s "$var" | {flavor.sh_key})',
        "  printf '%s=%s\\n' \"$key\" \"$value\" >> \"$conf\"",
        "done",
        f'printf \'%s\\n\' "${JAAS_ENV}" >> "$conf"',
        f"unset {JAAS_ENV}",
        *rack_lines(r.rack_label),
        *(adopt_volume(flavor, paths) if r.switch else format_volume(flavor, top.brokers > 1)),
        "# The JMX agent goes to the broker's JVM only: in the container's KAFKA_OPTS, every Kafka tool",
        "# run in the container would load it too and fail to bind its port.",
        *supervised(f'KAFKA_OPTS="${{{JMX_AGENT_ENV}:-}}${{KAFKA_OPTS:+ $KAFKA_OPTS}}" '
                    f'{bin_}/kafka-server-start.sh "$conf"', f"{paths.gate_dir}/{EVERYONE_GOES}"),
        "",
    ])


def rack_lines(label: str) -> list[str]:
    """sh lines that add broker.rack from the pod's copy of its node's `label`. Without the
    label (a node without zones, or an API server before 1.35) the broker starts rackless, as
    Kafka allows, and the log says why: the reconciler then counts it as a rack of its own."""
    if not label:
        return []
    return [
        f'if [ -n "${{{RACK_ENV}:-}}" ]; then',
        f"  printf 'broker.rack=%s\\n' \"${RACK_ENV}\" >> \"$conf\"",
        "else",
        f'  echo "hanzo-stream: this pod has no {label} label (its node has none, or the API'
        ' server lacks the PodTopologyLabels admission of Kubernetes 1.35+): the broker starts'
        ' without broker.rack, so replicas are not spread by zone; see the rackLabel setting'
        ' in docs/deploy.md" >&2',
        "fi",
    ]


def format_volume(flavor: Flavor, peers: bool = True) -> list[str]:
    """An empty volume is formatted as rendered for this pod at the stack's first `pulumi up`
    only. Later it is a volume that was lost: founding again with the old seat (a founder's
    `--initial-controllers`, or `--standalone`: a rival quorum of one) would put an empty log
    in a voter seat, so it starts as an observer with a new directory id instead, and the join
    sidecar replaces the old seat with it. Without `peers` (one broker) there is no quorum
    left to join: the lost volume held all of it, and the broker founds a new, empty one."""
    joins = [f'if [ "${{{FORMED_ENV}:-}}" = true ]; then set -- --no-initial-controllers; fi']
    return [
        *(joins if peers else []),
        "# First start on an empty volume: join the dynamic quorum as rendered for this pod.",
        f'{flavor.kafka_home}/bin/kafka-storage.sh format --ignore-formatted --cluster-id '
        f'"${flavor.cluster_id_var}" --config "$conf" "$@"',
    ]


def adopt_volume(flavor: Flavor, paths: Paths) -> list[str]:
    """takeoverSwitch: the volume must hold the old cluster's log directory. Formatting an empty
    one would start an empty cluster under the old addresses, so the pod stops instead and says
    why (without printing the ids: the cluster id is a secret of the stack)."""
    meta = _q(f"{paths.log_dirs}/meta.properties")
    fail = 'echo "hanzo-stream: takeoverSwitch is on but'
    return [
        "# takeoverSwitch: start on the old cluster's log directory, never format one.",
        f"if [ ! -s {meta} ]; then",
        f'  {fail} {paths.log_dirs}/meta.properties does not exist: this pod\'s volume (claim'
        f' data-$HOSTNAME) is not the old broker\'s, and nothing was formatted. Check that'
        ' statefulSetName is the old StatefulSet\'s and that its claim exists (kubectl get pvc);'
        ' docs/takeover.md" >&2',
        "  exit 65",
        "fi",
        f"if [ \"$(sed -n 's/^cluster.id=//p' {meta})\" != \"${flavor.cluster_id_var}\" ]; then",
        f'  {fail} the volume belongs to another cluster than the clusterId setting names. Set'
        f' clusterId to cluster.id of {paths.log_dirs}/meta.properties; docs/takeover.md" >&2',
        "  exit 65",
        "fi",
    ]


EVERYONE_GOES_KILL_SECONDS = 30  # a controlled shutdown with its quorum up takes 1-6 s here


def supervised(command: str, everyone_goes: str, after: int = EVERYONE_GOES_KILL_SECONDS) -> list[str]:
    """sh lines that run the broker as this shell's child, where `exec` would make it PID 1.

    Kafka's controlled shutdown waits up to 5 minutes for the controller. When the whole
    StatefulSet is deleted, every broker stops and the last ones find the quorum gone with
    their peers (three local brokers SIGTERMed 1 s apart: one waited 306 s; at once: all
    gone in 6 s; a pod cannot time its SIGTERM that finely). A JVM that is the container's
    PID 1 ignores SIGKILL from inside the pod, so the shell stays PID 1, passes SIGTERM on,
    and kills a broker still running `after` seconds later if the roll gate has marked the
    set as being deleted (`everyone_goes`). Rolls and drains have no marker: their broker
    takes the whole grace period if it needs it."""
    kill = (f"kill -TERM \"$broker\" 2>/dev/null || :; (sleep {after}; if [ -f {_q(everyone_goes)} ]"
            " && kill -0 \"$broker\" 2>/dev/null; then echo \"hanzo-stream: the StatefulSet is"
            f" being deleted and the broker still runs {after} s after SIGTERM (its quorum is gone):"
            " killing it\" >&2; kill -KILL \"$broker\"; fi) &")
    return [
        f"{command} &",
        "broker=$!",
        f"trap {_q(kill)} TERM",
        'rc=0; wait "$broker" || rc=$?',
        '# wait returns early when the trap runs; wait again until the broker has gone',
        'while kill -0 "$broker" 2>/dev/null; do rc=0; wait "$broker" || rc=$?; done',
        'exit "$rc"',
    ]


def join_script(flavor: Flavor, top: Topology, paths: Paths = Paths()) -> str:
    """The POSIX sh script of the join sidecar: make this pod a voter of the quorum.

    Idempotent, so it runs in every broker pod: it asks the quorum (through the other pods'
    controller endpoints) for `describe --replication`; a pod already among the voters with
    this volume's directory id (a founder, or a pod that joined before) marks itself ready
    once it is within `max_lag` records of the leader: a restarted controller counts as back
    only when it has caught up, so a roll never takes the next one while it replays. Every
    call to the tool is bounded (`call_timeout`): a hung JVM must not stall the loop. An
    observer that has caught up runs `add-controller` with a command config made of the pod's
    own server.properties (node.id, controller listener, log.dirs: the tool
    reads the directory id from meta.properties) plus the admin's client login. Kafka takes
    one voter change at a time and refuses the others ("timed out waiting for leader to
    handle previous add voter request"); every failure is retried after a fresh describe.
    A voter with this node id and another directory id is this pod's seat from a volume it
    lost (only this pod runs this node id): once the new volume has caught up as an observer,
    the script removes that seat (`remove-controller` of the old directory) and adds itself
    on a later round, as KIP-853 prescribes for a lost disk.

    The decision (the awk below: where this node stands, then the `case` on it) is
    hanzo_stream/pods/quorum.py's quorum_verdict, the one the roller uses, written again in awk
    because this sidecar runs in the broker image, which has no Python (apache/kafka is a JRE
    on Alpine) and must run Kafka's own `add-controller` / `remove-controller`, which the
    Python image cannot (no JVM, no Kafka tools). tests/unit/test_infra_growth.py runs this
    script's awk, and the whole script, against describe outputs recorded from real brokers
    (tests/unit/data/quorum) and generated ones, and requires quorum_verdict's answers.
    """
    def peers(i: int) -> str:  # the other pods' controller endpoints
        return ",".join(f"{n.host}:{n.controller_port}" for n in top.nodes if n.node_id != i)

    cases = [f"  {i}) peers={_q(peers(i))} ;;" for i in range(top.brokers)]
    meta = f"{paths.log_dirs}/meta.properties"
    return "\n".join([
        "set -u",
        "# Generated by infra/broker.py: make this pod a voter of the dynamic controller quorum.",
        "trap 'exit 0' TERM INT",
        'ordinal="${HOSTNAME##*-}"',
        'case "$ordinal" in',
        *cases,
        f'  *) echo "hanzo-stream join: pod $HOSTNAME is not one of the {top.brokers} brokers" >&2;'
        " exit 64 ;;",
        "esac",
        f"tool={_q(flavor.kafka_home + '/bin/kafka-metadata-quorum.sh')}",
        f"conf={_q(paths.properties)}",
        f"meta={_q(meta)}",
        f"work={_q(paths.join_dir)}",
        'interval="${HANZO_JOIN_INTERVAL:-10}"',
        f'max_lag="${{HANZO_JOIN_MAX_LAG:-{MAX_LAG}}}"',
        'call_timeout="${HANZO_JOIN_CALL_TIMEOUT:-90}"',
        "umask 077",
        f'rm -f "$work/{VOTER_MARKER}"',
        'log() { echo "hanzo-stream join: $*" >&2; }',
        'pause() { sleep "$1" & wait $!; }',
        "quorum() {",
        '  { cat "$conf"; echo security.protocol=SASL_SSL; echo sasl.mechanism=PLAIN;',
        f"    printf 'sasl.jaas.config=%s\\n' \"${ADMIN_JAAS_ENV}\"; }} > \"$work/admin.properties\"",
        # A JVM that hangs (a peer that accepts and never answers) must not stop the loop.
        '  timeout "$call_timeout" "$tool" --bootstrap-controller "$peers" \\',
        '    --command-config "$work/admin.properties" "$@" > "$work/out" 2> "$work/err"',
        '  rc=$?; [ "$rc" -ne 124 ] || echo "no answer in ${call_timeout}s" > "$work/err"',
        '  return "$rc"',
        "}",
        'until [ -s "$meta" ]; do log "waiting for the broker to format $meta"; pause "$interval"; done',
        "dir=$(sed -n 's/^directory.id=//p' \"$meta\")",
        "while :; do",
        "  if quorum describe --replication; then",
        '    state=$(awk -v id="$ordinal" -v dir="$dir" -v max="$max_lag" \'',
        '      $1 == id && ($NF == "Leader" || $NF == "Follower") {',
        '        if ($2 != dir) s = $2; else v = ($4 + 0 <= max + 0) ? "voter" : "behind " $4 }',
        # Only this directory's row: a removed seat stays listed as an observer for minutes.
        '      $1 == id && $2 == dir && $NF == "Observer" { o = $4 }',
        '      END { if (v != "") print v; else if (s != "") print "stale " s " " (o != "" ? o : "-");',
        '            else print (o != "" ? "observer " o : "absent") }\' "$work/out")',
        '    case "$state" in',
        f'      voter) : > "$work/{VOTER_MARKER}"; log "node $ordinal (directory $dir) is a voter"; break ;;',
        '      behind*) log "node $ordinal is a voter ${state#behind } records behind: catching up" ;;',
        '      stale*)',
        '        set -- $state; old="$2"; lag="$3"',
        '        if [ "$lag" -le "$max_lag" ] 2>/dev/null; then',
        '          log "node $ordinal\'s seat holds directory $old, a volume this pod lost; this volume'
        ' ($dir) has caught up: removing the old seat, then adding this one"',
        '          if quorum remove-controller --controller-id "$ordinal" \\',
        '              --controller-directory-id "$old"; then',
        '            log "removed the seat of directory $old"',
        '          else log "remove-controller refused, retrying: $(head -n 1 "$work/err")"; fi',
        '        else log "node $ordinal\'s seat holds directory $old, a volume this pod lost; this'
        ' volume ($dir) catches up first (lag $lag)"; fi ;;',
        "      observer*)",
        '        lag="${state#observer }"',
        '        if [ "$lag" -le "$max_lag" ] 2>/dev/null; then',
        '          if quorum add-controller; then log "$(cat "$work/out")"',
        '          else log "add-controller refused, retrying: $(head -n 1 "$work/err")"; fi',
        '        else log "observer, lag $lag: catching up"; fi ;;',
        '      *) log "node $ordinal is not fetching from the quorum yet" ;;',
        "    esac",
        "  else",
        '    log "quorum not reachable yet: $(head -n 1 "$work/err")"',
        "  fi",
        '  pause "$interval"',
        "done",
        "while :; do pause 3600; done",
        "",
    ])


def jmx_opts(paths: Paths, rules_file: str) -> str:
    return (f"-javaagent:{paths.jmx_dir}/jmx_prometheus_javaagent.jar="
            f"{PORTS['metrics']}:{paths.jmx_rules_dir}/{rules_file}")
