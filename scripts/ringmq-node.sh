#!/usr/bin/env bash
# A `ringmq serve` process on demand, with the same verbs and the same DIR/env as
# scripts/rocketmq.sh, so a suite can run against either broker through one interface.
#
# Usage:
#   scripts/ringmq-node.sh start DIR [broker.conf]   free loopback ports, 2 shards, metrics off
#   scripts/ringmq-node.sh restart-broker DIR        SIGTERM, wait, start again (same ports)
#   scripts/ringmq-node.sh kill-broker DIR           SIGKILL
#   scripts/ringmq-node.sh stop DIR                  SIGTERM, then SIGKILL past the deadline
#   scripts/ringmq-node.sh start-cluster DIR         a standalone name server and two master
#       groups (broker-a, broker-b) registered with it; DIR/env: NAMESRV_ADDR, BROKER_A_ADDR,
#       BROKER_B_ADDR and the PIDs NAMESRV_PID, BROKER_A_PID, BROKER_B_PID
#   scripts/ringmq-node.sh start-cluster-ha DIR      a standalone name server and group broker-a as
#       a SYNC_MASTER and its SLAVE (brokerId 1, slaveReadEnable=true); DIR/env: NAMESRV_ADDR,
#       BROKER_A_ADDR, BROKER_A_HA_ADDR, BROKER_A_SLAVE_ADDR and the PIDs
#   scripts/ringmq-node.sh start-cluster-controller DIR  three controllers (`ringmq controller`,
#       RocketMQ's controller files), a standalone name server and group broker-a of two
#       brokers in controller mode with RocketMQ's controller quick-start broker file
#       (brokerId=-1, brokerRole=SLAVE, allAckInSyncStateSet=true): the controllers pick the
#       master. DIR/env: NAMESRV_ADDR, CONTROLLER_ADDR (a;b;c), BROKER_A_N0_ADDR,
#       BROKER_A_N1_ADDR and the PIDs (CONTROLLER_N<i>_PID, BROKER_A_N<i>_PID)
#   scripts/ringmq-node.sh restart-member DIR G N     starts again member N of group broker-G of
#       start-cluster-controller (after a kill), with its file and store; replaces its PID
#   scripts/ringmq-node.sh start-namesrv DIR [k=v..] only a standalone name server (a fresh DIR/env),
#       the k=v arguments appended to its namesrv.conf
#   scripts/ringmq-node.sh start-group DIR G ADDR    one ASYNC_MASTER group broker-G registered with
#       the name server at ADDR (any: ringmq's or RocketMQ's); appends BROKER_<G>_ADDR/_PID
#   scripts/ringmq-node.sh stop-cluster DIR          SIGTERM every broker DIR/env names, then the
#       name server and the controllers (SIGKILL past the deadline)
# Env: RINGMQ_BIN (default target/debug/ringmq, built when missing), FLUSH (sync|async,
#      default sync), RINGMQ_SET ("key=value key=value", passed as --set each).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=lib/controller-confs.sh
source "$root/scripts/lib/controller-confs.sh"
START_DEADLINE_S=${START_DEADLINE_S:-60}
STOP_DEADLINE_S=${STOP_DEADLINE_S:-60}

die() { echo "ringmq-node.sh: $*" >&2; exit 2; }

bin() {
  local bin=${RINGMQ_BIN:-$root/target/debug/ringmq}
  if [[ ! -x "$bin" ]]; then
    [[ -z "${RINGMQ_BIN:-}" ]] || die "RINGMQ_BIN=$bin is not an executable"
    (cd "$root" && cargo build --bin ringmq) >&2
  fi
  echo "$bin"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start_node() {
  local dir=$1
  # shellcheck disable=SC1091
  source "$dir/env"
  local args=(serve --dir "$dir/store" --port "${BROKER_ADDR##*:}" --namesrv-port "${NAMESRV_ADDR##*:}"
    --flush "${FLUSH:-sync}" --shards 2 --metrics-port 0)
  [[ -f "$dir/broker.conf" ]] && args+=(--broker-conf "$dir/broker.conf")
  for setting in ${RINGMQ_SET:-}; do args+=(--set "$setting"); done
  local deadline=$((SECONDS + START_DEADLINE_S)) pid
  while :; do
    : >"$dir/node.out"
    nohup "$(bin)" "${args[@]}" >>"$dir/node.out" 2>&1 </dev/null &
    pid=$!
    while ! grep -q "ringmq: name server listening on" "$dir/node.out"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        # A restart may find a port lent to another process's outgoing connection meanwhile.
        if grep -q "Address already in use" "$dir/node.out" && ((SECONDS < deadline)); then
          sleep 0.2; continue 2
        fi
        cat "$dir/node.out" >&2; die "ringmq exited during start"
      fi
      ((SECONDS < deadline)) || die "ringmq printed no addresses within ${START_DEADLINE_S} s"
      sleep 0.05
    done
    break
  done
  sed -i '/^BROKER_PID=/d; /^NAMESRV_PID=/d' "$dir/env"
  # One process is both: the name server is embedded.
  { echo "BROKER_PID=$pid"; echo "NAMESRV_PID=$pid"; } >>"$dir/env"
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
  local pid=$1
  [[ -n "$pid" ]] && alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_DEADLINE_S))
  while alive "$pid"; do
    if ((SECONDS >= deadline)); then
      echo "ringmq-node.sh: pid $pid ignored SIGTERM for ${STOP_DEADLINE_S} s; SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    sleep 0.1
  done
}

# Starts `ringmq ARGS...` in the background with its output in OUT and waits (bounded)
# until OUT has a line starting with READY; prints its pid.
start_until() {
  local out=$1 ready=$2; shift 2
  nohup "$(bin)" "$@" >"$out" 2>&1 </dev/null &
  local pid=$! deadline=$((SECONDS + START_DEADLINE_S))
  until grep -qs "^$ready" "$out"; do
    alive "$pid" || { cat "$out" >&2; die "ringmq $1 exited during start"; }
    ((SECONDS < deadline)) || die "ringmq $1 printed no '$ready' within ${START_DEADLINE_S} s"
    sleep 0.05
  done
  echo "$pid"
}

# Starts `ringmq serve` on DIR/NAME.conf (RINGMQ_SET passed as --set each), output in
# DIR/NAME.out, and waits (bounded) until it listens; prints its pid.
serve_broker() {
  local dir=$1 name=$2
  local args=(serve --broker-conf "$dir/$name.conf")
  for setting in ${RINGMQ_SET:-}; do args+=(--set "$setting"); done
  start_until "$dir/$name.out" "ringmq: listening on " "${args[@]}"
}

# The broker.conf lines every broker of these clusters shares: loopback, one unpinned shard,
# metrics off, FLUSH's flush type, reads from a slave allowed.
shared_broker_lines() {
  cat <<CONF
bindAddress=127.0.0.1
brokerIP1=127.0.0.1
metricsExporterType=DISABLE
flushDiskType=$([[ "${FLUSH:-sync}" == sync ]] && echo SYNC_FLUSH || echo ASYNC_FLUSH)
shards=1
pinShardThreads=false
slaveReadEnable=true
CONF
}

# The standalone name server of DIR (a fresh DIR/env): NAMESRV_ADDR and NAMESRV_PID. Further
# arguments are namesrv.conf lines (key=value).
start_namesrv() {
  local dir=$1 namesrv_port pid
  shift
  namesrv_port=$(free_port)
  printf 'listenPort=%s\nbindAddress=127.0.0.1\n' "$namesrv_port" >"$dir/namesrv.conf"
  local line
  for line in "$@"; do echo "$line" >>"$dir/namesrv.conf"; done
  pid=$(start_until "$dir/namesrv.out" "ringmq: name server " namesrv -c "$dir/namesrv.conf")
  { echo "NAMESRV_ADDR=127.0.0.1:$namesrv_port"; echo "NAMESRV_PID=$pid"; } >"$dir/env"
}

# Starts one broker of group broker-GROUP registered with NAMESRV (host:port): brokerId ID,
# brokerRole ROLE; appends BROKER_<KEY>_ADDR and BROKER_<KEY>_PID to DIR/env, KEY being
# GROUP (a master) or GROUP_SLAVE (brokerId above 0), upper-cased. A master's HA port
# (haListenPort) is picked free too, and written as BROKER_<KEY>_HA_ADDR.
start_broker_of() {
  local dir=$1 group=$2 namesrv=$3 id=$4 role=$5 port ha_port name key pid
  port=$(free_port)
  name=broker-$group
  key=${group^^}
  ((id == 0)) || { name=broker-$group-$id; key=${key}_SLAVE; }
  cat >"$dir/$name.conf" <<CONF
brokerClusterName=DefaultCluster
brokerName=broker-$group
brokerId=$id
brokerRole=$role
namesrvAddr=$namesrv
listenPort=$port
storePathRootDir=$dir/store-$group-$id
CONF
  shared_broker_lines >>"$dir/$name.conf"
  if ((id == 0)); then
    ha_port=$(free_port)
    echo "haListenPort=$ha_port" >>"$dir/$name.conf"
    echo "BROKER_${key}_HA_ADDR=127.0.0.1:$ha_port" >>"$dir/env"
  fi
  pid=$(serve_broker "$dir" "$name")
  { echo "BROKER_${key}_ADDR=127.0.0.1:$port"; echo "BROKER_${key}_PID=$pid"; } >>"$dir/env"
}

# The standalone name server and the two groups of start-cluster.
start_cluster() {
  local dir=$1 group
  start_namesrv "$dir"
  # shellcheck disable=SC1091
  source "$dir/env"
  for group in a b; do start_broker_of "$dir" "$group" "$NAMESRV_ADDR" 0 ASYNC_MASTER; done
}

# The name server and group broker-a of start-cluster-ha: a SYNC_MASTER and its slave.
start_cluster_ha() {
  local dir=$1
  start_namesrv "$dir"
  # shellcheck disable=SC1091
  source "$dir/env"
  start_broker_of "$dir" a "$NAMESRV_ADDR" 0 SYNC_MASTER
  start_broker_of "$dir" a "$NAMESRV_ADDR" 1 SLAVE
}

# Three controllers of one Raft group on free loopback ports, each with RocketMQ's controller
# file keys; appends CONTROLLER_ADDR (the brokers' controllerAddr) and CONTROLLER_N<i>_PID.
start_controllers() {
  local dir=$1 i pid
  write_controller_confs "$dir"
  for i in 0 1 2; do
    pid=$(start_until "$dir/controller-n$i.out" "ringmq: controller " controller -c "$dir/controller-n$i.conf")
    echo "CONTROLLER_N${i}_PID=$pid" >>"$dir/env"
  done
  # Quoted: DIR/env is sourced, and the list's separator is a shell one.
  echo "CONTROLLER_ADDR='$CONTROLLER_ADDRS'" >>"$dir/env"
}

# Broker N of group broker-GROUP in controller mode, from RocketMQ's controller quick-start
# broker file (the controllers assign its id and role); appends BROKER_<GROUP>_N<N>_ADDR and
# _PID.
start_controller_broker() {
  local dir=$1 group=$2 n=$3 port ha_port name key pid
  port=$(free_port)
  ha_port=$(free_port)
  name=broker-$group-n$n
  key=${group^^}_N$n
  # shellcheck disable=SC1091
  source "$dir/env"
  controller_broker_lines "$group" "$CONTROLLER_ADDR" "$NAMESRV_ADDR" "$port" "$ha_port" \
    "$dir/store-$name" >"$dir/$name.conf"
  shared_broker_lines >>"$dir/$name.conf"
  pid=$(serve_broker "$dir" "$name")
  { echo "BROKER_${key}_ADDR=127.0.0.1:$port"; echo "BROKER_${key}_PID=$pid"; } >>"$dir/env"
}

# Starts again broker N of group GROUP of start-cluster-controller (stopped or killed), with
# its file and store; replaces its PID in DIR/env.
restart_controller_broker() {
  local dir=$1 group=$2 n=$3 name key pid
  name=broker-$group-n$n
  key=${group^^}_N$n
  [[ -f "$dir/$name.conf" ]] || die "no $dir/$name.conf: not a member started by start-cluster-controller"
  [[ -f "$dir/$name.out" ]] && mv "$dir/$name.out" "$dir/$name.out.$(date +%s%N)"
  pid=$(serve_broker "$dir" "$name")
  sed -i "/^BROKER_${key}_PID=/d" "$dir/env"
  echo "BROKER_${key}_PID=$pid" >>"$dir/env"
}

# The controllers, the name server and group broker-a of start-cluster-controller. The first
# broker is master once it listens (it runs in the role the controllers gave it); the second
# then follows it.
start_cluster_controller() {
  local dir=$1
  start_namesrv "$dir"
  start_controllers "$dir"
  start_controller_broker "$dir" a 0
  start_controller_broker "$dir" a 1
}

# Stops every process DIR/env names: the brokers first (so they unregister), then the name
# server.
stop_cluster() {
  local dir=$1 key value
  [[ -f "$dir/env" ]] || return 0
  while IFS='=' read -r key value; do
    [[ "$key" == BROKER_*_PID ]] && stop_pid "$value"
  done <"$dir/env"
  while IFS='=' read -r key value; do
    [[ "$key" == NAMESRV_PID || "$key" == CONTROLLER_*_PID ]] && stop_pid "$value"
  done <"$dir/env"
  return 0
}

case "${1:-}" in
  start-cluster | start-cluster-ha | start-cluster-controller)
    dir=${2:?usage: $1 DIR}
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    "${1//-/_}" "$dir"
    cat "$dir/env"
    ;;
  start-namesrv)
    dir=${2:?usage: start-namesrv DIR [key=value ...]}
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    start_namesrv "$dir" "${@:3}"
    cat "$dir/env"
    ;;
  restart-member)
    dir=$(cd "${2:?usage: restart-member DIR GROUP N}" && pwd)
    restart_controller_broker "$dir" "${3:?group}" "${4:?member number}"
    cat "$dir/env"
    ;;
  start-group)
    dir=$(cd "${2:?usage: start-group DIR GROUP NAMESRV_ADDR}" && pwd)
    start_broker_of "$dir" "${3:?group}" "${4:?name server address}" 0 ASYNC_MASTER
    cat "$dir/env"
    ;;
  stop-cluster)
    stop_cluster "$(cd "${2:?usage: stop-cluster DIR}" && pwd)"
    ;;
  start)
    dir=${2:?usage: start DIR}
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [[ -n "${3:-}" ]] && cp "$3" "$dir/broker.conf"
    { echo "NAMESRV_ADDR=127.0.0.1:$(free_port)"; echo "BROKER_ADDR=127.0.0.1:$(free_port)"; } >"$dir/env"
    start_node "$dir"
    cat "$dir/env"
    ;;
  restart-broker)
    dir=$(cd "${2:?usage: restart-broker DIR}" && pwd)
    # shellcheck disable=SC1091
    source "$dir/env"
    stop_pid "$BROKER_PID"
    cat "$dir/node.out" >>"$dir/node.out.before-restart"
    start_node "$dir"
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
    stop_pid "${BROKER_PID:-}"
    ;;
  *)
    sed -n '2,24p' "$0" >&2
    exit 2
    ;;
esac
