#!/usr/bin/env bash
# The stock Apache RocketMQ 5.5.0 mqadmin (org.apache.rocketmq.tools.command.MQAdminStartup)
# from the jars tests/java resolves, with the given arguments:
#   scripts/mqadmin.sh clusterList -n 127.0.0.1:9876
# The jars are resolved (Maven) when missing. The heap is small (MQADMIN_HEAP, 256m) and
# user.home / rocketmq.home.dir point at a temporary directory removed on exit, so nothing
# is written into $HOME (the tools log under ~/logs/rocketmqlogs). mqadmin runs in that
# directory too, since some commands write files into the current one (consumerStatus
# writes <time>/<clientId>), so a relative file argument would be read from there too
# (none of the daily commands takes one).
# Exit code: mqadmin's own.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
lib="$root/tests/java/target/rocketmq-lib"
if [[ ! -f "$lib/rocketmq-tools-5.5.0.jar" ]]; then
  echo "mqadmin.sh: resolving RocketMQ 5.5.0 jars (tests/java, Maven)" >&2
  (cd "$root/tests/java" && mvn -B -q dependency:copy-dependencies) >&2
fi
[[ -f "$lib/rocketmq-tools-5.5.0.jar" ]] || { echo "mqadmin.sh: jars missing in $lib" >&2; exit 2; }
home=$(mktemp -d "${TMPDIR:-/tmp}/mqadmin-home-XXXXXX")
trap 'rm -rf "$home"' EXIT
rc=0
cd "$home"
java -Xms${MQADMIN_HEAP:-256m} -Xmx${MQADMIN_HEAP:-256m} -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Duser.home="$home" -Drocketmq.home.dir="$home" -Drocketmq.client.logRoot="$home/logs" \
  -cp "$lib/*" org.apache.rocketmq.tools.command.MQAdminStartup "$@" || rc=$?
exit $rc
