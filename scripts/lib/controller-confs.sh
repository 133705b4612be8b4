# Sourced by scripts/ringmq-node.sh and scripts/rocketmq.sh (which define free_port): the
# files of controller mode, written the same for both brokers: three controllers of one Raft
# group with RocketMQ's controller keys, and the lines of RocketMQ's controller quick-start
# broker file.
#
# write_controller_confs DIR: picks three free loopback ports and writes
# DIR/controller-n<i>.conf (store DIR/controller-n<i>); sets CONTROLLER_PORTS (an array) and
# CONTROLLER_ADDRS (the brokers' controllerAddr, `a;b;c`).
write_controller_confs() {
  local dir=$1 peers="" i
  CONTROLLER_PORTS=()
  CONTROLLER_ADDRS=""
  for i in 0 1 2; do CONTROLLER_PORTS+=("$(free_port)"); done
  for i in 0 1 2; do
    peers+="${peers:+;}n$i-127.0.0.1:${CONTROLLER_PORTS[$i]}"
    CONTROLLER_ADDRS+="${CONTROLLER_ADDRS:+;}127.0.0.1:${CONTROLLER_PORTS[$i]}"
  done
  for i in 0 1 2; do
    cat >"$dir/controller-n$i.conf" <<CONF
controllerDLegerGroup=group1
controllerDLegerPeers=$peers
controllerDLegerSelfId=n$i
controllerStorePath=$dir/controller-n$i
enableElectUncleanMaster=false
notifyBrokerRoleChanged=true
CONF
  done
}

# controller_broker_lines GROUP CONTROLLER_ADDR NAMESRV_ADDR PORT HA_PORT STORE: the lines of
# RocketMQ's controller quick-start broker file (the controllers assign the id and role) for
# a broker of group broker-GROUP; each script appends what its broker needs besides.
controller_broker_lines() {
  local group=$1 controllers=$2 namesrv=$3 port=$4 ha_port=$5 store=$6
  cat <<CONF
brokerClusterName=DefaultCluster
brokerName=broker-$group
brokerId=-1
brokerRole=SLAVE
enableControllerMode=true
controllerAddr=$controllers
allAckInSyncStateSet=true
namesrvAddr=$namesrv
listenPort=$port
haListenPort=$ha_port
storePathRootDir=$store
storePathCommitLog=$store/commitlog
CONF
}
