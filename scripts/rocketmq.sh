#!/usr/bin/env bash
# The real Apache RocketMQ 5.5.0 (name server + broker) on demand, from the jars Maven
# Central serves (tests/java/pom.xml); no distribution download.
#
# Usage:
#   scripts/rocketmq.sh start DIR [broker.conf-extra-lines-file]
#       Writes DIR/namesrv.conf and DIR/broker.conf on loopback ports picked free, starts a
#       name server and a broker (SYNC_FLUSH unless FLUSH=ASYNC_FLUSH), waits (bounded)
#       until both answer, and writes DIR/env:
#         NAMESRV_ADDR=127.0.0.1:P  BROKER_ADDR=127.0.0.1:Q  NAMESRV_PID=..  BROKER_PID=..
#   scripts/rocketmq.sh restart-broker DIR   SIGTERM the broker, wait, start it again
#   scripts/rocketmq.sh kill-broker DIR      SIGKILL the broker (no restart)
#   scripts/rocketmq.sh stop DIR             stop both by PID (SIGTERM, then SIGKILL)
#   scripts/rocketmq.sh classpath            print the classpath (resolving it first)
#   scripts/rocketmq.sh start-cluster DIR    a name server and two master groups (broker-a,
#       broker-b) registered with it; DIR/env: NAMESRV_ADDR, BROKER_A_ADDR, BROKER_B_ADDR and
#       the PIDs NAMESRV_PID, BROKER_A_PID, BROKER_B_PID
#   scripts/rocketmq.sh stop-cluster DIR     stop the three by PID (SIGTERM, then SIGKILL)
#
# Heaps fit a 2-core, 24 GiB machine that runs other processes beside it: 512 MiB for the
# name server, 1 GiB for the broker (NAMESRV_HEAP, BROKER_HEAP override). Logs go to
# DIR/home/logs/rocketmqlogs/ (user.home is DIR/home) and DIR/*.out.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
lib="$root/tests/java/target/rocketmq-lib"
START_DEADLINE_S=${START_DEADLINE_S:-90}
STOP_DEADLINE_S=${STOP_DEADLINE_S:-60}

die() { echo "rocketmq.sh: $*" >&2; exit 2; }

ensure_jars() {
  if [[ ! -f "$lib/rocketmq-broker-5.5.0.jar" ]]; then
    echo "rocketmq.sh: resolving RocketMQ 5.5.0 jars (tests/java, Maven)" >&2
    (cd "$root/tests/java" && mvn -B -q dependency:copy-dependencies) >&2
  fi
  [[ -f "$lib/rocketmq-broker-5.5.0.jar" ]] || die "jars missing in $lib after resolving"
}

classpath() { ensure_jars; printf '%s' "$lib/*"; }

free_port() {
  python3 - <<'PY'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

# A free port P such that P-2 .. P+1 are free too: the broker opens its remoting port P,
# its fast (VIP) channel on P-2 and its HA port (set explicitly to P+1 here).
free_broker_port() {
  for _ in $(seq 1 50); do
    local p
    p=$(python3 - <<'PY'
import random, socket
for _ in range(200):
    base = random.randint(20000, 60000)
    socks = []
    try:
        for port in (base - 2, base - 1, base, base + 1):
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            socks.append(s)
        print(base)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
PY
)
    [[ -n "$p" ]] && { echo "$p"; return; }
  done
  die "no free broker port block found"
}

# Waits until host:port accepts a connection or the process is gone or the deadline passes.
wait_port() {
  local port=$1 pid=$2 what=$3 deadline=$((SECONDS + START_DEADLINE_S))
  while ((SECONDS < deadline)); do
    kill -0 "$pid" 2>/dev/null || die "$what (pid $pid) exited during start; see its log"
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  die "$what did not answer on 127.0.0.1:$port within ${START_DEADLINE_S} s"
}

java_opts() {
  local heap=$1 dir=$2
  echo "-server -Xms$heap -Xmx$heap -XX:+UseG1GC -Duser.home=$dir/home -Drocketmq.home.dir=$dir/home"
}

start_broker() {
  local dir=$1
  # shellcheck disable=SC1091
  source "$dir/env"
  ROCKETMQ_HOME="$dir/home" nohup java $(java_opts "${BROKER_HEAP:-1g}" "$dir") \
    -cp "$(classpath)" org.apache.rocketmq.broker.BrokerStartup -c "$dir/broker.conf" \
    >>"$dir/broker.out" 2>&1 </dev/null &
  local pid=$!
  sed -i '/^BROKER_PID=/d' "$dir/env"
  echo "BROKER_PID=$pid" >>"$dir/env"
  wait_port "${BROKER_ADDR##*:}" "$pid" "RocketMQ broker"
  # The port opens before registration with the name server ends: wait for "boot success".
  local deadline=$((SECONDS + START_DEADLINE_S))
  until grep -q "boot success" "$dir/broker.out"; do
    ((SECONDS < deadline)) || die "broker printed no 'boot success' within ${START_DEADLINE_S} s"
    kill -0 "$pid" 2>/dev/null || die "broker (pid $pid) exited during start; see $dir/broker.out"
    sleep 0.2
  done
}

# Whether pid is a live process. A process that exited but was not reaped (its parent is a
# shell that ended, and whoever inherited it does not reap) still answers kill -0: a zombie
# counts as gone.
alive() {
  local pid=$1 state
  kill -0 "$pid" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ "$state" != Z ]]
}

stop_pid() {
  local pid=$1 what=$2
  [[ -n "$pid" ]] || return 0
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_DEADLINE_S))
  while alive "$pid"; do
    if ((SECONDS >= deadline)); then
      echo "rocketmq.sh: $what (pid $pid) ignored SIGTERM for ${STOP_DEADLINE_S} s; SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
  wait "$pid" 2>/dev/null || true
}

# Writes DIR/broker-G.conf for group G registering with the name server on port $2.
write_group_conf() {
  local dir=$1 namesrv_port=$2 group=$3 port=$4
  mkdir -p "$dir/store-$group"
  cat >"$dir/broker-$group.conf" <<CONF
brokerClusterName=DefaultCluster
brokerName=broker-$group
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=${FLUSH:-SYNC_FLUSH}
listenPort=$port
bindAddress=127.0.0.1
haListenPort=$((port + 1))
namesrvAddr=127.0.0.1:$namesrv_port
brokerIP1=127.0.0.1
brokerIP2=127.0.0.1
storePathRootDir=$dir/store-$group
storePathCommitLog=$dir/store-$group/commitlog
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
CONF
}

# Starts group G's broker of start-cluster and waits (bounded) for its "boot success".
start_group() {
  local dir=$1 group=$2 port=$3
  local out="$dir/broker-$group.out"
  ROCKETMQ_HOME="$dir/home" nohup java $(java_opts "${BROKER_HEAP:-1g}" "$dir") \
    -Duser.home="$dir/home-$group" \
    -cp "$(classpath)" org.apache.rocketmq.broker.BrokerStartup -c "$dir/broker-$group.conf" \
    >>"$out" 2>&1 </dev/null &
  local pid=$! upper=${group^^}
  { echo "BROKER_${upper}_ADDR=127.0.0.1:$port"; echo "BROKER_${upper}_PID=$pid"; } >>"$dir/env"
  wait_port "$port" "$pid" "RocketMQ broker-$group"
  local deadline=$((SECONDS + START_DEADLINE_S))
  until grep -q "boot success" "$out"; do
    ((SECONDS < deadline)) || die "broker-$group printed no 'boot success' within ${START_DEADLINE_S} s"
    kill -0 "$pid" 2>/dev/null || die "broker-$group (pid $pid) exited during start; see $out"
    sleep 0.2
  done
}

cmd=${1:-}
case "$cmd" in
  start-cluster)
    dir=${2:?usage: start-cluster DIR}
    mkdir -p "$dir/home" "$dir/home-a" "$dir/home-b"
    dir=$(cd "$dir" && pwd)
    namesrv_port=$(free_port)
    printf 'listenPort=%s\nbindAddress=127.0.0.1\n' "$namesrv_port" >"$dir/namesrv.conf"
    ROCKETMQ_HOME="$dir/home" nohup java $(java_opts "${NAMESRV_HEAP:-512m}" "$dir") \
      -cp "$(classpath)" org.apache.rocketmq.namesrv.NamesrvStartup -c "$dir/namesrv.conf" \
      >"$dir/namesrv.out" 2>&1 </dev/null &
    { echo "NAMESRV_ADDR=127.0.0.1:$namesrv_port"; echo "NAMESRV_PID=$!"; } >"$dir/env"
    wait_port "$namesrv_port" "$!" "RocketMQ name server"
    for group in a b; do
      port=$(free_broker_port)
      write_group_conf "$dir" "$namesrv_port" "$group" "$port"
      start_group "$dir" "$group" "$port"
    done
    cat "$dir/env"
    ;;
  stop-cluster)
    dir=$(cd "${2:?usage: stop-cluster DIR}" && pwd)
    [[ -f "$dir/env" ]] || exit 0
    # shellcheck disable=SC1091
    source "$dir/env"
    stop_pid "${BROKER_A_PID:-}" "RocketMQ broker-a"
    stop_pid "${BROKER_B_PID:-}" "RocketMQ broker-b"
    stop_pid "${NAMESRV_PID:-}" "RocketMQ name server"
    ;;
  start)
    dir=${2:?usage: start DIR}
    extra=${3:-}
    mkdir -p "$dir/home" "$dir/store"
    dir=$(cd "$dir" && pwd)
    namesrv_port=$(free_port)
    broker_port=$(free_broker_port)
    cat >"$dir/namesrv.conf" <<CONF
listenPort=$namesrv_port
bindAddress=127.0.0.1
CONF
    cat >"$dir/broker.conf" <<CONF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=${FLUSH:-SYNC_FLUSH}
listenPort=$broker_port
bindAddress=127.0.0.1
haListenPort=$((broker_port + 1))
namesrvAddr=127.0.0.1:$namesrv_port
brokerIP1=127.0.0.1
brokerIP2=127.0.0.1
storePathRootDir=$dir/store
storePathCommitLog=$dir/store/commitlog
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
timerWheelEnable=true
CONF
    if [[ -n "$extra" ]]; then cat "$extra" >>"$dir/broker.conf"; fi
    {
      echo "NAMESRV_ADDR=127.0.0.1:$namesrv_port"
      echo "BROKER_ADDR=127.0.0.1:$broker_port"
    } >"$dir/env"
    ROCKETMQ_HOME="$dir/home" nohup java $(java_opts "${NAMESRV_HEAP:-512m}" "$dir") \
      -cp "$(classpath)" org.apache.rocketmq.namesrv.NamesrvStartup -c "$dir/namesrv.conf" \
      >"$dir/namesrv.out" 2>&1 </dev/null &
    echo "NAMESRV_PID=$!" >>"$dir/env"
    wait_port "$namesrv_port" "$!" "RocketMQ name server"
    start_broker "$dir"
    cat "$dir/env"
    ;;
  restart-broker)
    dir=$(cd "${2:?usage: restart-broker DIR}" && pwd)
    # shellcheck disable=SC1091
    source "$dir/env"
    stop_pid "${BROKER_PID:-}" "RocketMQ broker"
    : >"$dir/broker.out.restart"; cat "$dir/broker.out" >>"$dir/broker.out.restart"; : >"$dir/broker.out"
    start_broker "$dir"
    ;;
  kill-broker)
    dir=$(cd "${2:?usage: kill-broker DIR}" && pwd)
    # shellcheck disable=SC1091
    source "$dir/env"
    kill -KILL "$BROKER_PID" 2>/dev/null || true
    ;;
  stop)
    dir=$(cd "${2:?usage: stop DIR}" && pwd)
    [[ -f "$dir/env" ]] || exit 0
    # shellcheck disable=SC1091
    source "$dir/env"
    stop_pid "${BROKER_PID:-}" "RocketMQ broker"
    stop_pid "${NAMESRV_PID:-}" "RocketMQ name server"
    ;;
  classpath)
    classpath; echo
    ;;
  *)
    sed -n '2,24p' "$0" >&2
    exit 2
    ;;
esac
