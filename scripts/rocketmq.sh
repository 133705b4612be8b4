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
#   scripts/rocketmq.sh start-cluster-ha DIR a name server and group broker-a as a SYNC_MASTER
#       and its SLAVE (brokerId 1, slaveReadEnable=true); DIR/env: NAMESRV_ADDR, BROKER_A_ADDR,
#       BROKER_A_SLAVE_ADDR and the PIDs
#   scripts/rocketmq.sh start-cluster-controller DIR  three controllers (ControllerStartup), a
#       name server and group broker-a of two brokers in controller mode with RocketMQ's
#       controller quick-start broker file (brokerId=-1, brokerRole=SLAVE,
#       allAckInSyncStateSet=true): the controllers pick the master. DIR/env: NAMESRV_ADDR,
#       CONTROLLER_ADDR (a;b;c, quoted), BROKER_A_N0_ADDR, BROKER_A_N1_ADDR and the PIDs
#   scripts/rocketmq.sh restart-member DIR G N  starts again member N of group broker-G of
#       start-cluster-controller (after a kill), with its file and store; replaces its PID
#   scripts/rocketmq.sh start-namesrv DIR    only a name server (a fresh DIR/env)
#   scripts/rocketmq.sh start-group DIR G ADDR  one ASYNC_MASTER group broker-G registered with the
#       name server at ADDR (any: RocketMQ's or ringmq's); appends BROKER_<G>_ADDR and _PID
#   scripts/rocketmq.sh stop-cluster DIR     stop every broker DIR/env names, then the name
#       server, by PID (SIGTERM, then SIGKILL)
#
# A broker that exits or does not boot within START_DEADLINE_S is killed, the tails of its
# stdout and broker.log are printed, and it is tried again on a fresh port block with an empty
# store, START_ATTEMPTS (3) times in all; a restart-broker retries on its own port and store.
#
# Heaps fit a 2-core, 24 GiB machine that runs other processes beside it: 512 MiB for the
# name server, 1 GiB for the broker (NAMESRV_HEAP, BROKER_HEAP override). Logs go to
# DIR/home/logs/rocketmqlogs/ (user.home is DIR/home) and DIR/*.out.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=lib/controller-confs.sh
source "$root/scripts/lib/controller-confs.sh"
lib="$root/tests/java/target/rocketmq-lib"
START_DEADLINE_S=${START_DEADLINE_S:-90}
STOP_DEADLINE_S=${STOP_DEADLINE_S:-60}

die() { echo "rocketmq.sh: $*" >&2; exit 2; }

ensure_jars() {
  if [[ ! -f "$lib/rocketmq-broker-5.5.0.jar" || ! -f "$lib/rocketmq-controller-5.5.0.jar" ]]; then
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

# Whether pid is a live process. A process that exited but was not reaped (its parent is a
# shell that ended, and whoever inherited it does not reap) still answers kill -0: a zombie
# counts as gone.
alive() {
  local pid=$1 state
  kill -0 "$pid" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ "$state" != Z ]]
}

# Waits until host:port accepts a connection or the process is gone or the deadline passes;
# fails (status 1, with the reason on stderr) unless the port answered.
wait_port() {
  local port=$1 pid=$2 what=$3 deadline=$((SECONDS + START_DEADLINE_S))
  while ((SECONDS < deadline)); do
    alive "$pid" || { echo "rocketmq.sh: $what (pid $pid) exited during start" >&2; return 1; }
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  echo "rocketmq.sh: $what did not answer on 127.0.0.1:$port within ${START_DEADLINE_S} s" >&2
  return 1
}

# Waits (bounded) until broker PID printed "boot success" to OUT (its port opens before its
# registration with the name server ends); fails (status 1) if it exits or the deadline passes.
wait_boot() {
  local out=$1 pid=$2 what=$3 deadline=$((SECONDS + START_DEADLINE_S))
  until grep -q "boot success" "$out"; do
    ((SECONDS < deadline)) || { echo "rocketmq.sh: $what printed no 'boot success' within ${START_DEADLINE_S} s" >&2; return 1; }
    alive "$pid" || { echo "rocketmq.sh: $what (pid $pid) exited during start" >&2; return 1; }
    sleep 0.2
  done
}

# A broker that did not start: killed if still there, then its stdout and its own log's last
# lines on stderr, so a CI log says why (the reference broker once exited during start in CI
# with nothing but "see broker.out" to show).
report_failed_start() {
  local pid=$1 out=$2 home=$3
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "---- last lines of $out" >&2
  tail -n 40 "$out" >&2 || true
  local log="$home/logs/rocketmqlogs/broker.log"
  if [[ -f "$log" ]]; then
    echo "---- last lines of $log" >&2
    tail -n 40 "$log" >&2 || true
  fi
  echo "----" >&2
}

# How many times a broker start is tried (each on a fresh port block) before giving up.
START_ATTEMPTS=${START_ATTEMPTS:-3}

java_opts() {
  local heap=$1 dir=$2
  echo "-server -Xms$heap -Xmx$heap -XX:+UseG1GC -Duser.home=$dir/home -Drocketmq.home.dir=$dir/home"
}

# One try at starting the single broker of DIR (DIR/broker.conf, BROKER_ADDR in DIR/env);
# fails (status 1, the broker killed and its logs' tails on stderr) if it did not boot.
start_broker_once() {
  local dir=$1
  # shellcheck disable=SC1091
  source "$dir/env"
  ROCKETMQ_HOME="$dir/home" nohup java $(java_opts "${BROKER_HEAP:-1g}" "$dir") \
    -cp "$(classpath)" org.apache.rocketmq.broker.BrokerStartup -c "$dir/broker.conf" \
    >>"$dir/broker.out" 2>&1 </dev/null &
  local pid=$!
  sed -i '/^BROKER_PID=/d' "$dir/env"
  echo "BROKER_PID=$pid" >>"$dir/env"
  if wait_port "${BROKER_ADDR##*:}" "$pid" "RocketMQ broker" &&
    wait_boot "$dir/broker.out" "$pid" "RocketMQ broker"; then
    return 0
  fi
  report_failed_start "$pid" "$dir/broker.out" "$dir/home"
  return 1
}

# Starts the single broker of DIR on its configured port (a restart keeps its address and
# store), trying START_ATTEMPTS times.
start_broker() {
  local dir=$1 attempt
  for attempt in $(seq 1 "$START_ATTEMPTS"); do
    start_broker_once "$dir" && return 0
    echo "rocketmq.sh: broker start attempt $attempt of $START_ATTEMPTS failed" >&2
  done
  die "the broker did not start in $START_ATTEMPTS attempts; see $dir/broker.out"
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

# Writes DIR/NAME.conf for a broker of group broker-G registering with NAMESRV (host:port):
# brokerId ID, brokerRole ROLE, remoting port PORT, HA port PORT+1 (free_broker_port keeps it
# free). NAME is broker-G for a master, broker-G-ID for a slave.
write_group_conf() {
  local dir=$1 namesrv=$2 group=$3 port=$4 id=${5:-0} role=${6:-ASYNC_MASTER} name
  name=$(broker_name "$group" "$id")
  mkdir -p "$dir/store-$name" "$dir/home-$name"
  cat >"$dir/$name.conf" <<CONF
brokerClusterName=DefaultCluster
brokerName=broker-$group
brokerId=$id
brokerRole=$role
flushDiskType=${FLUSH:-SYNC_FLUSH}
listenPort=$port
bindAddress=127.0.0.1
haListenPort=$((port + 1))
namesrvAddr=$namesrv
brokerIP1=127.0.0.1
brokerIP2=127.0.0.1
storePathRootDir=$dir/store-$name
storePathCommitLog=$dir/store-$name/commitlog
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
slaveReadEnable=true
CONF
}

# The file and process name of group G's broker ID: broker-G (the master) or broker-G-ID.
broker_name() {
  local group=$1 id=${2:-0}
  if ((id == 0)); then echo "broker-$group"; else echo "broker-$group-$id"; fi
}

# Starts broker ID of group G (its conf written by write_group_conf) and waits (bounded) for
# its "boot success"; appends BROKER_<KEY>_ADDR and _PID to DIR/env, KEY being G (a master)
# or G_SLAVE, upper-cased.
start_group() {
  local dir=$1 group=$2 port=$3 id=${4:-0} name key pid
  name=$(broker_name "$group" "$id")
  key=${group^^}
  ((id == 0)) || key=${key}_SLAVE
  pid=$(launch_broker "$dir" "$name" "$port") || return 1
  { echo "BROKER_${key}_ADDR=127.0.0.1:$port"; echo "BROKER_${key}_PID=$pid"; } >>"$dir/env"
}

# Starts the broker of DIR/NAME.conf (output appended to DIR/NAME.out, logs under
# DIR/home-NAME) and waits (bounded) until PORT answers and it printed "boot success"; prints
# its pid. Fails (status 1, the broker killed and its logs' tails on stderr) if it did not boot.
launch_broker() {
  local dir=$1 name=$2 port=$3 out="$1/$2.out"
  ROCKETMQ_HOME="$dir/home" nohup java $(java_opts "${BROKER_HEAP:-1g}" "$dir") \
    -Duser.home="$dir/home-$name" \
    -cp "$(classpath)" org.apache.rocketmq.broker.BrokerStartup -c "$dir/$name.conf" \
    >>"$out" 2>&1 </dev/null &
  local pid=$!
  if wait_port "$port" "$pid" "RocketMQ $name" && wait_boot "$out" "$pid" "RocketMQ $name"; then
    echo "$pid"
    return 0
  fi
  report_failed_start "$pid" "$out" "$dir/home-$name"
  return 1
}

# A name server for DIR (a fresh DIR/env with NAMESRV_ADDR and NAMESRV_PID).
start_namesrv() {
  local dir=$1 namesrv_port
  mkdir -p "$dir/home"
  namesrv_port=$(free_port)
  printf 'listenPort=%s\nbindAddress=127.0.0.1\n' "$namesrv_port" >"$dir/namesrv.conf"
  ROCKETMQ_HOME="$dir/home" nohup java $(java_opts "${NAMESRV_HEAP:-512m}" "$dir") \
    -cp "$(classpath)" org.apache.rocketmq.namesrv.NamesrvStartup -c "$dir/namesrv.conf" \
    >"$dir/namesrv.out" 2>&1 </dev/null &
  { echo "NAMESRV_ADDR=127.0.0.1:$namesrv_port"; echo "NAMESRV_PID=$!"; } >"$dir/env"
  wait_port "$namesrv_port" "$!" "RocketMQ name server" || die "the name server did not start; see $dir/namesrv.out"
}

# One broker of group G (ID, ROLE) on a free port block, registered with NAMESRV.
start_broker_of() {
  local dir=$1 group=$2 namesrv=$3 id=$4 role=$5 port attempt name
  name=$(broker_name "$group" "$id")
  for attempt in $(seq 1 "$START_ATTEMPTS"); do
    # A fresh port block and an empty store each time: a port taken between the check and
    # the bind is one way a start fails.
    rm -rf "$dir/store-$name"
    port=$(free_broker_port)
    write_group_conf "$dir" "$namesrv" "$group" "$port" "$id" "$role"
    start_group "$dir" "$group" "$port" "$id" && return 0
    echo "rocketmq.sh: $name start attempt $attempt of $START_ATTEMPTS failed" >&2
  done
  die "$name did not start in $START_ATTEMPTS attempts; see $dir/$name.out"
}

# Three controllers of one DLedger group on free loopback ports (each opens only its own
# controllerDLegerPeers port); appends CONTROLLER_ADDR and CONTROLLER_N<i>_PID.
start_controllers() {
  local dir=$1 i pid
  write_controller_confs "$dir"
  for i in 0 1 2; do
    mkdir -p "$dir/home-controller-n$i"
    ROCKETMQ_HOME="$dir/home" nohup java $(java_opts "${CONTROLLER_HEAP:-512m}" "$dir") \
      -Duser.home="$dir/home-controller-n$i" \
      -cp "$(classpath)" org.apache.rocketmq.controller.ControllerStartup -c "$dir/controller-n$i.conf" \
      >"$dir/controller-n$i.out" 2>&1 </dev/null &
    pid=$!
    echo "CONTROLLER_N${i}_PID=$pid" >>"$dir/env"
    wait_port "${CONTROLLER_PORTS[$i]}" "$pid" "RocketMQ controller n$i" || die "controller n$i did not start; see $dir/controller-n$i.out"
  done
  # Quoted: DIR/env is sourced, and the list's separator is a shell one.
  echo "CONTROLLER_ADDR='$CONTROLLER_ADDRS'" >>"$dir/env"
}

# Broker N of group broker-G in controller mode (RocketMQ's controller quick-start broker
# file) on a free port block; appends BROKER_<G>_N<N>_ADDR and _PID.
start_controller_broker() {
  local dir=$1 group=$2 n=$3 port name attempt
  name=broker-$group-n$n
  # shellcheck disable=SC1091
  source "$dir/env"
  for attempt in $(seq 1 "$START_ATTEMPTS"); do
    rm -rf "$dir/store-$name" && mkdir -p "$dir/store-$name" "$dir/home-$name"
    port=$(free_broker_port)
    controller_broker_lines "$group" "$CONTROLLER_ADDR" "$NAMESRV_ADDR" "$port" \
      "$((port + 1))" "$dir/store-$name" >"$dir/$name.conf"
    cat >>"$dir/$name.conf" <<CONF
bindAddress=127.0.0.1
brokerIP1=127.0.0.1
brokerIP2=127.0.0.1
flushDiskType=${FLUSH:-SYNC_FLUSH}
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
slaveReadEnable=true
CONF
    local pid
    if pid=$(launch_broker "$dir" "$name" "$port"); then
      { echo "BROKER_${group^^}_N${n}_ADDR=127.0.0.1:$port"; echo "BROKER_${group^^}_N${n}_PID=$pid"; } >>"$dir/env"
      return 0
    fi
    echo "rocketmq.sh: $name start attempt $attempt of $START_ATTEMPTS failed" >&2
  done
  die "$name did not start in $START_ATTEMPTS attempts; see $dir/$name.out"
}

# Starts again broker N of group G of start-cluster-controller (after a kill), with its file
# and store, on its port; replaces its PID in DIR/env.
restart_controller_broker() {
  local dir=$1 group=$2 n=$3 name port
  name=broker-$group-n$n
  [[ -f "$dir/$name.conf" ]] || die "no $dir/$name.conf: not a member started by start-cluster-controller"
  port=$(sed -n 's/^listenPort=//p' "$dir/$name.conf")
  local out="$dir/$name.out" pid
  # A fresh output file: the boot line of the first start must not count.
  [[ -f "$out" ]] && mv "$out" "$out.$(date +%s%N)"
  pid=$(launch_broker "$dir" "$name" "$port") || die "$name did not start again; see $out"
  sed -i "/^BROKER_${group^^}_N${n}_PID=/d" "$dir/env"
  echo "BROKER_${group^^}_N${n}_PID=$pid" >>"$dir/env"
}

# Stops every process DIR/env names: the brokers first, then the name server.
stop_cluster() {
  local dir=$1 key value
  [[ -f "$dir/env" ]] || return 0
  while IFS='=' read -r key value; do
    [[ "$key" == BROKER_*_PID ]] && stop_pid "$value" "RocketMQ ${key%_PID}"
  done <"$dir/env"
  while IFS='=' read -r key value; do
    [[ "$key" == NAMESRV_PID ]] && stop_pid "$value" "RocketMQ name server"
    [[ "$key" == CONTROLLER_*_PID ]] && stop_pid "$value" "RocketMQ ${key%_PID}"
  done <"$dir/env"
  return 0
}

cmd=${1:-}
case "$cmd" in
  start-cluster | start-cluster-ha | start-cluster-controller | start-namesrv)
    dir=${2:?usage: $1 DIR}
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    start_namesrv "$dir"
    # shellcheck disable=SC1091
    source "$dir/env"
    case "$cmd" in
      start-cluster)
        for group in a b; do start_broker_of "$dir" "$group" "$NAMESRV_ADDR" 0 ASYNC_MASTER; done
        ;;
      start-cluster-ha)
        # RocketMQ's classic master/slave: the slave learns the master's HA address
        # (brokerIP2:haListenPort) from its registration with the name server.
        start_broker_of "$dir" a "$NAMESRV_ADDR" 0 SYNC_MASTER
        start_broker_of "$dir" a "$NAMESRV_ADDR" 1 SLAVE
        ;;
      start-cluster-controller)
        start_controllers "$dir"
        start_controller_broker "$dir" a 0
        start_controller_broker "$dir" a 1
        ;;
    esac
    cat "$dir/env"
    ;;
  restart-member)
    dir=$(cd "${2:?usage: restart-member DIR GROUP N}" && pwd)
    restart_controller_broker "$dir" "${3:?group}" "${4:?member number}"
    cat "$dir/env"
    ;;
  start-group)
    dir=$(cd "${2:?usage: start-group DIR GROUP NAMESRV_ADDR}" && pwd)
    mkdir -p "$dir/home"
    start_broker_of "$dir" "${3:?group}" "${4:?name server address}" 0 ASYNC_MASTER
    cat "$dir/env"
    ;;
  stop-cluster)
    stop_cluster "$(cd "${2:?usage: stop-cluster DIR}" && pwd)"
    ;;
  start)
    dir=${2:?usage: start DIR}
    extra=${3:-}
    mkdir -p "$dir/home" "$dir/store"
    dir=$(cd "$dir" && pwd)
    namesrv_port=$(free_port)
    cat >"$dir/namesrv.conf" <<CONF
listenPort=$namesrv_port
bindAddress=127.0.0.1
CONF
    echo "NAMESRV_ADDR=127.0.0.1:$namesrv_port" >"$dir/env"
    ROCKETMQ_HOME="$dir/home" nohup java $(java_opts "${NAMESRV_HEAP:-512m}" "$dir") \
      -cp "$(classpath)" org.apache.rocketmq.namesrv.NamesrvStartup -c "$dir/namesrv.conf" \
      >"$dir/namesrv.out" 2>&1 </dev/null &
    echo "NAMESRV_PID=$!" >>"$dir/env"
    wait_port "$namesrv_port" "$!" "RocketMQ name server" || die "the name server did not start; see $dir/namesrv.out"
    for attempt in $(seq 1 "$START_ATTEMPTS"); do
      # A fresh port block and an empty store each time: a port taken between the check
      # and the bind is one way a start fails.
      rm -rf "$dir/store" && mkdir -p "$dir/store"
      [[ ! -f "$dir/broker.out" ]] || mv "$dir/broker.out" "$dir/broker.out.failed-$((attempt - 1))"
      broker_port=$(free_broker_port)
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
      sed -i '/^BROKER_ADDR=/d' "$dir/env"
      echo "BROKER_ADDR=127.0.0.1:$broker_port" >>"$dir/env"
      start_broker_once "$dir" && break
      echo "rocketmq.sh: broker start attempt $attempt of $START_ATTEMPTS failed" >&2
      ((attempt < START_ATTEMPTS)) || die "the broker did not start in $START_ATTEMPTS attempts; see $dir/broker.out"
    done
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
    sed -n '2,32p' "$0" >&2
    exit 2
    ;;
esac
