#!/usr/bin/env bash
# Differential wire check: the Java scenario suite (tests/java) runs against each broker through
# a recording proxy (scripts/wirediff/proxy.py), and scripts/wirediff/report.py lists, per
# request code, where ringmq's answers differ in shape from Apache RocketMQ 5.5.0's.
#
# Usage: scripts/wire-diff.sh [both|ringmq|rocketmq|report] [-Dtest=Pattern ...extra mvn args]
#   both (default): record rocketmq, then ringmq, then report. ringmq / rocketmq: record that
#   one only (the report is made if the other recording exists from an earlier run).
#   report: only remake the report from the recordings in target/wire-diff/.
# Output in target/wire-diff/: <target>.jsonl (recordings), <target>.mvn.log,
#   <target>.proxy.log, <target>.mqadmin.log, <target>-surefire/, report.md (also printed).
# Env: RINGMQ_BIN (default target/release/ringmq; never built here), RINGMQ_SET (passed to
#   scripts/ringmq-node.sh; default raises the disk-space thresholds), MQADMIN=0 to skip the
#   mqadmin commands run through the proxy after the suite, KEEP=1 to keep broker dirs,
#   REUSE_SUITE=1 to run the snapshot of the last run again (re-recording one side against
#   the same scenarios as the other).
#
# Per target: the broker starts in DIR (scripts/ringmq-node.sh or scripts/rocketmq.sh), the
# proxy in front of it, and the suite gets VIEW/env whose NAMESRV_ADDR/BROKER_ADDR are the
# proxy's, and VIEW/control.sh, which runs the real control script on DIR (restart-broker
# keeps working) and refreshes VIEW/env. The suite runs from a snapshot of tests/java taken
# once (target/wire-diff/java), so both brokers see the same scenarios even while tests/java
# is being edited, and concurrent runs of scripts/java-compat.sh are not disturbed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/target/wire-diff"
wd="$root/scripts/wirediff"
which=${1:-both}
[[ $# -gt 0 ]] && shift
export RINGMQ_BIN=${RINGMQ_BIN:-$root/target/release/ringmq}
# ringmq counts disk use as statvfs (blocks - available) / blocks, which on a shared host's
# disk with many reserved blocks can read 90% with tens of GiB free, and then refuses sends
# (SERVICE_NOT_AVAILABLE, "disk full") and deletes segments early. The wire diff is about
# shapes, not disk pressure: unless RINGMQ_SET is given, raise those thresholds.
export RINGMQ_SET=${RINGMQ_SET-diskMaxUsedSpaceRatio=95 diskSpaceCleanForciblyRatio=99 diskSpaceWarningLevelRatio=99}
MQADMIN=${MQADMIN:-1}
PROXY_DEADLINE_S=${PROXY_DEADLINE_S:-20}

die() { echo "wire-diff.sh: $*" >&2; exit 2; }

case "$which" in
  both|ringmq|rocketmq|report) ;;
  *) sed -n '2,19p' "$0" >&2; exit 2 ;;
esac
mkdir -p "$out"

cleanups=()
cleanup() {
  local i
  for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done
  cleanups=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

stop_proxy() {
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 20))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      echo "wire-diff.sh: proxy $pid ignored SIGTERM for 20 s; SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
  done
  wait "$pid" 2>/dev/null || true
}

env_value() { grep -E "^$1=" "$2" | tail -n 1 | cut -d= -f2-; }

# mqadmin commands through the proxy: admin request codes the suite may not reach.
mqadmin_round() {
  local ns=$1 broker=$2 log=$3
  local cp="$root/tests/java/target/rocketmq-lib/*"
  local topic="WireDiffAdmin" group="WireDiffAdminGroup"
  local cmds=(
    "clusterList -n $ns"
    "updateTopic -b $broker -t $topic -r 4 -w 4"
    "topicList -n $ns"
    "topicRoute -n $ns -t $topic"
    "topicStatus -n $ns -t $topic"
    "topicClusterList -n $ns -t $topic"
    "brokerStatus -n $ns -b $broker"
    "getBrokerConfig -n $ns -b $broker"
    "updateSubGroup -n $ns -b $broker -g $group"
    "consumerProgress -n $ns -g $group"
    "brokerConsumeStats -n $ns -b $broker"
    "deleteTopic -n $ns -c DefaultCluster -t $topic"
  )
  local c
  : >"$log"
  for c in "${cmds[@]}"; do
    echo "== mqadmin $c" >>"$log"
    # shellcheck disable=SC2086
    timeout 90 java -Xmx256m -Duser.home="$out/mqadmin-home" -cp "$cp" \
      org.apache.rocketmq.tools.command.MQAdminStartup $c >>"$log" 2>&1 </dev/null \
      || echo "(exit $?)" >>"$log"
  done
}

record() {
  local target=$1; shift
  local control dir view
  case "$target" in
    ringmq) control="$root/scripts/ringmq-node.sh" ;;
    rocketmq) control="$root/scripts/rocketmq.sh" ;;
  esac
  dir=$(mktemp -d "/tmp/wire-diff-$target-XXXXXX")
  view=$(mktemp -d "/tmp/wire-diff-$target-view-XXXXXX")
  echo "== wire-diff: $target broker in $dir, suite view in $view"
  if ! bash "$control" start "$dir" >"$out/$target.control.log" 2>&1; then
    cat "$out/$target.control.log" >&2
    bash "$control" stop "$dir" >/dev/null 2>&1 || true
    die "$target did not start (logs in $dir)"
  fi
  cleanups+=("bash '$control' stop '$dir' >>'$out/$target.control.log' 2>&1")
  local up_ns up_broker
  up_ns=$(env_value NAMESRV_ADDR "$dir/env")
  up_broker=$(env_value BROKER_ADDR "$dir/env")

  rm -f "$view/proxy.env"
  local vip=()
  # rocketmq.sh reserves the real broker's fast channel at port - 2; ringmq has none.
  [[ "$target" == rocketmq ]] && vip=(--vip-upstream "${up_broker%:*}:$((${up_broker##*:} - 2))")
  python3 "$wd/proxy.py" --namesrv-upstream "$up_ns" --broker-upstream "$up_broker" "${vip[@]}" \
    --record "$out/$target.jsonl" --label "$target" --env-file "$view/proxy.env" \
    >"$out/$target.proxy.log" 2>&1 </dev/null &
  local proxy_pid=$!
  cleanups+=("stop_proxy $proxy_pid")
  local deadline=$((SECONDS + PROXY_DEADLINE_S))
  until [[ -f "$view/proxy.env" ]]; do
    kill -0 "$proxy_pid" 2>/dev/null || { cat "$out/$target.proxy.log" >&2; die "proxy exited"; }
    ((SECONDS < deadline)) || die "proxy did not listen within ${PROXY_DEADLINE_S} s"
    sleep 0.1
  done
  sed -n '1,3p' "$out/$target.proxy.log"

  # The suite's view of DIR: every entry of DIR linked, env with the proxy's addresses.
  cat >"$view/refresh.sh" <<EOF
#!/usr/bin/env bash
# wire-diff: refreshes $view from $dir (env with the proxy's addresses).
for f in "$dir"/*; do
  name=\$(basename "\$f")
  case "\$name" in env|control.log) continue ;; esac
  [[ -e "$view/\$name" || -L "$view/\$name" ]] || ln -s "\$f" "$view/\$name"
done
{ grep -v -E '^(NAMESRV_ADDR|BROKER_ADDR)=' "$dir/env"
  grep -E '^(NAMESRV_ADDR|BROKER_ADDR)=' "$view/proxy.env"
  echo "UPSTREAM_NAMESRV_ADDR=\$(grep -E '^NAMESRV_ADDR=' "$dir/env" | cut -d= -f2-)"
  echo "UPSTREAM_BROKER_ADDR=\$(grep -E '^BROKER_ADDR=' "$dir/env" | cut -d= -f2-)"
} >"$view/env.tmp"
mv "$view/env.tmp" "$view/env"
EOF
  cat >"$view/control.sh" <<EOF
#!/usr/bin/env bash
# wire-diff: the suite's control script. Runs $control on $dir, whatever dir it is given
# (the suite passes $view), then refreshes $view/env.
verb=\${1:?usage: control.sh VERB [DIR]}
rc=0
bash "$control" "\$verb" "$dir" || rc=\$?
bash "$view/refresh.sh"
exit \$rc
EOF
  bash "$view/refresh.sh"

  echo "== wire-diff: $target: running the suite through the proxy"
  rm -rf "$out/java/target/surefire-reports" "$out/$target-surefire"
  (cd "$out/java" && mvn -B -Dcompat.dir="$view" -Dcompat.control="$view/control.sh" \
      -Dcompat.target="$target" test "$@" 2>&1 | grep -v '^\[INFO\] Download' \
      | tee "$out/$target.mvn.log" | grep -E '^\[(ERROR|WARNING)\] Tests|Tests run:|BUILD') || true
  cp -r "$out/java/target/surefire-reports" "$out/$target-surefire" 2>/dev/null || true
  # The suite's outcome, for the report's header (report.py reads <recording stem>.suite.txt).
  { grep -E '^\[(INFO|ERROR|WARNING)\] Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+$' \
      "$out/$target.mvn.log" | tail -n 1 | sed -E 's/^\[[A-Z]+\] //'
    grep -E '<<< (FAILURE|ERROR)!$' "$out/$target.mvn.log" | grep -v ' -- in ' \
      | sed -E 's/^\[ERROR\] /failed: /; s/ -- Time elapsed.*//'
  } >"$out/$target.suite.txt" || true

  if [[ "$MQADMIN" != 0 ]]; then
    echo "== wire-diff: $target: mqadmin commands through the proxy"
    mqadmin_round "$(env_value NAMESRV_ADDR "$view/env")" "$(env_value BROKER_ADDR "$view/env")" \
      "$out/$target.mqadmin.log"
  fi

  cleanup
  tail -n 1 "$out/$target.proxy.log"
  if [[ "${KEEP:-0}" != 1 ]]; then rm -rf "$dir" "$view"; fi
}

if [[ "$which" != report ]]; then
  if [[ "$which" != rocketmq ]]; then
    [[ -x "$RINGMQ_BIN" ]] || die "RINGMQ_BIN=$RINGMQ_BIN is not an executable (build it first)"
  fi
  # Resolve the jars and compile a snapshot of the suite before any broker starts.
  bash "$root/scripts/rocketmq.sh" classpath >/dev/null
  if [[ "${REUSE_SUITE:-0}" == 1 && -d "$out/java/src" ]]; then
    echo "== wire-diff: reusing the suite snapshot in $out/java"
  else
    rm -rf "$out/java"
    mkdir -p "$out/java"
    cp "$root/tests/java/pom.xml" "$out/java/"
    cp -r "$root/tests/java/src" "$out/java/"
  fi
  if ! (cd "$out/java" && mvn -B -q -Dstyle.color=never test-compile) >"$out/compile.log" 2>&1; then
    cat "$out/compile.log" >&2
    die "the suite snapshot does not compile (see $out/compile.log)"
  fi
  case "$which" in
    both) record rocketmq "$@"; record ringmq "$@" ;;
    *) record "$which" "$@" ;;
  esac
fi

if [[ -f "$out/ringmq.jsonl" && -f "$out/rocketmq.jsonl" ]]; then
  python3 "$wd/report.py" "$out/ringmq.jsonl" "$out/rocketmq.jsonl" --out "$out/report.md"
  echo
  echo "== wire-diff: report in $out/report.md"
else
  echo "wire-diff.sh: no report: need both $out/ringmq.jsonl and $out/rocketmq.jsonl" >&2
fi
