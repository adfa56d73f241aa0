#!/usr/bin/env bash
# cluster.sh: a cluster of N hosts on this one machine, for multi-host tests and measurements.
#
# Each host is a network namespace with its own loopback and one veth link to a bridge in the
# root namespace; the bridge has an address too, so that mpirun (which stays in the root
# namespace) reaches the Open MPI daemons it starts on the hosts. Links can be shaped with tc
# (bandwidth, latency). Ranks are launched with Open MPI's rsh launcher, with this script as the
# "ssh": it enters the host's namespace instead of logging in, so MPI traffic between ranks is TCP
# across the veth links and the bridge, not shared memory. Why: the distributed code's behaviour
# when a host dies or its link fails can then be tested on one machine, without real hosts.
#
# Run `cluster.sh help` for the usage. Needs root, iproute2 (ip, tc) and util-linux (unshare).
set -euo pipefail

self=$(readlink -f "$0")
prog=${0##*/}
state_root=${MELD_CLUSTER_STATE:-/run/meld-cluster}
max_hosts=200

usage() {
  cat << EOF
usage: $prog [--id ID] COMMAND [ARGS]

A cluster of hosts made of network namespaces. Cluster ID (0-255) has subnet 10.77.ID.0/24:
the bridge meldID-br is 10.77.ID.1 in the root namespace, host i (0-based) is namespace
meldID-hi at 10.77.ID.(i+2), with hostname meldID-hi, linked to the bridge by the veth pair
meldIDhi (root side) / eth0 (host side). ID comes from --id, else \$MELD_CLUSTER_ID.

commands:
  up N [--rate R] [--delay D] [--owner PID]
        Makes a cluster of N hosts (1-$max_hosts) under the first free ID (or --id) and prints
        the ID. --rate (tc units: 1gbit, 100mbit) and --delay (tc units: 50us, 1ms) shape every
        link in both directions (host -> bridge and bridge -> host), so a message between two
        hosts sees the delay twice and the slower of two rates. --rate alone uses tbf; --delay
        uses netem (which this kernel must have). The cluster belongs to process PID (default:
        the caller); any later 'up' tears down clusters whose owner is gone (a test killed
        before its cleanup ran).
  down [--all]
        Tears the cluster down (kills its processes, deletes namespaces, links, state). Does
        nothing if it does not exist. --all: every cluster this script made.
  run N [up options] -- COMMAND [ARGS]
        up, then COMMAND with MELD_CLUSTER_ID set, then down, also when COMMAND fails or this
        script is interrupted. Exits with COMMAND's status.
  exec HOST COMMAND [ARGS]
        Runs COMMAND on HOST (an index, meldID-hi, or its address) in the host's namespace.
  mpirun [MPIRUN ARGS] -- PROGRAM [ARGS]
        Open MPI's mpirun over the hosts: one slot per host (so -np defaults to N; add
        --oversubscribe -np K for more), TCP over the cluster subnet only, every MELD_* variable
        passed to the ranks.
  agent HOST COMMAND...
        What mpirun runs instead of ssh (plm_rsh_agent): the command line, in HOST's namespace.
  check
        Exits 0 if clusters can be made here, else prints why and exits 77.
  list
        The clusters that exist, with their hosts and owners.
  help  This text.

exit status: 0 ok, 2 bad usage, 77 namespaces cannot be made here (not root, no ip), else the
failing command's.

example:
  id=\$($prog up 2 --rate 1gbit)
  $prog --id \$id mpirun -- ./data_parallel --backend mpi
  $prog --id \$id down
EOF
}

die() {  # die STATUS MESSAGE: the message on stderr, then exit
  echo "$prog: $2" >&2
  exit "$1"
}

# Whether namespaces, veths and bridges can be made here (tested by making a namespace).
check() {
  [ "$(id -u)" -eq 0 ] || die 77 "needs root (network namespaces and links); run as root"
  command -v ip > /dev/null || die 77 "needs iproute2's 'ip' (apt-get install iproute2)"
  command -v unshare > /dev/null || die 77 "needs util-linux's 'unshare'"
  local probe="meld-probe-$$"
  ip netns add "$probe" 2> /dev/null || die 77 "cannot make a network namespace here ('ip netns add' failed)"
  ip netns del "$probe"
}

# Names and addresses, all derived from the ID so that every command (and the agent) can find a
# cluster without reading its state.
ns_name() { echo "meld$1-h$2"; }
veth_name() { echo "meld$1h$2"; }
bridge_name() { echo "meld$1-br"; }
subnet() { echo "10.77.$1.0/24"; }
host_addr() { echo "10.77.$1.$(($2 + 2))"; }

need_id() {
  [ -n "$id" ] || die 2 "no cluster: give --id ID or set MELD_CLUSTER_ID"
  [[ $id =~ ^[0-9]+$ ]] && [ "$id" -le 255 ] || die 2 "bad cluster ID '$id' (0-255)"
}

hosts_of() {  # the number of hosts of cluster $1 (from its state; 0 if none)
  cat "$state_root/$1/hosts" 2> /dev/null || echo 0
}

# Tears down cluster $1 whatever state it is in; every step tolerates missing pieces.
teardown() {
  local i ns pids
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^meld$1-h[0-9]+$" || true); do
    # A namespace lives on while a process is in it: kill those first.
    pids=$(ip netns pids "$ns" 2> /dev/null || true)
    # shellcheck disable=SC2086 # one pid a word
    [ -z "$pids" ] || kill -9 $pids 2> /dev/null || true
    ip netns del "$ns" 2> /dev/null || true
  done
  for i in $(ip -o link show 2> /dev/null | sed -n "s/^[0-9]*: \(meld$1h[0-9]*\)[@:].*/\1/p"); do
    ip link del "$i" 2> /dev/null || true
  done
  ip link del "$(bridge_name "$1")" 2> /dev/null || true
  rm -rf "${state_root:?}/$1"
}

# Tears down clusters whose owner process has ended (a run killed before its cleanup).
reap_stale() {
  local d owner
  for d in "$state_root"/*/; do
    [ -f "$d/owner" ] || continue
    owner=$(cat "$d/owner")
    if [ "$owner" != 0 ] && ! kill -0 "$owner" 2> /dev/null; then
      echo "$prog: tearing down cluster $(basename "$d") (its owner $owner is gone)" >&2
      teardown "$(basename "$d")"
    fi
  done
}

shape() {  # shape DEV [netns exec prefix...]: applies $rate / $delay to DEV's egress
  local dev=$1
  shift
  if [ -n "$delay" ]; then
    "$@" tc qdisc add dev "$dev" root netem delay "$delay" ${rate:+rate "$rate"} ||
      die 1 "tc netem failed on $dev (does this kernel have sch_netem? without it only --rate works)"
  elif [ -n "$rate" ]; then
    # burst: at least one 64 KB TSO segment, else tbf drops it; latency bounds the queue.
    "$@" tc qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 50ms ||
      die 1 "tc tbf failed on $dev (bad --rate '$rate'?)"
  fi
}

up() {
  local n="" owner=$PPID
  rate="" delay=""
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) [ $# -ge 2 ] || die 2 "--rate needs a value"; rate=$2; shift 2 ;;
      --delay) [ $# -ge 2 ] || die 2 "--delay needs a value"; delay=$2; shift 2 ;;
      --owner) [ $# -ge 2 ] || die 2 "--owner needs a value"; owner=$2; shift 2 ;;
      -*) die 2 "up: unknown option '$1'" ;;
      *) [ -z "$n" ] || die 2 "up: one host count only"; n=$1; shift ;;
    esac
  done
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le $max_hosts ] ||
    die 2 "up: the number of hosts must be 1-$max_hosts, not '$n'"
  [[ $owner =~ ^[0-9]+$ ]] || die 2 "up: bad --owner '$owner'"
  check
  command -v tc > /dev/null || [ -z "$rate$delay" ] || die 77 "needs iproute2's 'tc' to shape links"
  mkdir -p "$state_root"
  reap_stale
  # The ID: claimed by creating its state directory (atomic, so parallel runs never share one).
  if [ -n "$id" ]; then
    need_id
    mkdir "$state_root/$id" 2> /dev/null || die 1 "cluster $id exists ('$prog --id $id down' first)"
  else
    for id in $(seq 0 255); do
      ip link show "$(bridge_name "$id")" > /dev/null 2>&1 && continue
      mkdir "$state_root/$id" 2> /dev/null && break
      id=""
    done
    [ -n "$id" ] || die 1 "no free cluster ID (255 clusters exist?)"
  fi
  echo "$owner" > "$state_root/$id/owner"
  # Whatever fails below, nothing stays behind.
  trap 'teardown "$id"' EXIT
  trap 'exit 130' INT TERM HUP
  local br i ns veth
  br=$(bridge_name "$id")
  ip link add "$br" type bridge
  ip addr add "10.77.$id.1/24" dev "$br"
  ip link set "$br" up
  for ((i = 0; i < n; i++)); do
    ns=$(ns_name "$id" $i) veth=$(veth_name "$id" $i)
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$br" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$(host_addr "$id" $i)/24" dev eth0
    ip -n "$ns" link set eth0 up
    shape "$veth"
    shape eth0 ip netns exec "$ns"
  done
  echo "$n" > "$state_root/$id/hosts"
  # The hostfile: one slot per host, by address (the agent maps an address to its namespace).
  for ((i = 0; i < n; i++)); do echo "$(host_addr "$id" $i) slots=1"; done > "$state_root/$id/hostfile"
  trap - EXIT INT TERM HUP
  echo "$id"
}

down() {
  if [ "${1:-}" = --all ]; then
    local d
    for d in $(ip -o link show type bridge 2> /dev/null | sed -n 's/^[0-9]*: meld\([0-9]*\)-br[@:].*/\1/p'); do
      teardown "$d"
    done
    for d in "$state_root"/*/; do [ -d "$d" ] && teardown "$(basename "$d")"; done
    return 0
  fi
  [ $# -eq 0 ] || die 2 "down: unknown argument '$1'"
  need_id
  teardown "$id"
}

# Maps a host (index, namespace name or address) of cluster $id to its index.
host_index() {
  local h=$1
  if [[ $h =~ ^[0-9]+$ ]]; then
    echo "$h"
  elif [[ $h =~ ^meld$id-h([0-9]+)$ ]]; then
    echo "${BASH_REMATCH[1]}"
  elif [[ $h =~ ^10\.77\.$id\.([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -ge 2 ]; then
    echo $((BASH_REMATCH[1] - 2))
  else
    die 2 "'$h' is not a host of cluster $id (an index, meld$id-hI, or 10.77.$id.X)"
  fi
}

# Runs "$@" on host $1 of cluster $id: in its network namespace and in a UTS namespace of its
# own whose hostname is the namespace's name (so each rank can tell where it runs).
on_host() {
  local i ns
  i=$(host_index "$1")
  shift
  ns=$(ns_name "$id" "$i")
  ip netns list | grep -q "^$ns\b" || die 1 "no host $ns (is cluster $id up?)"
  exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
}

agent() {
  # Open MPI calls this as it would call ssh: [options] HOST COMMAND-LINE...; the command line is
  # one shell command (words joined with spaces, as ssh joins them for the remote shell).
  while [ $# -gt 0 ] && [[ $1 == -* ]]; do shift; done
  [ $# -ge 2 ] || die 2 "agent: needs HOST COMMAND"
  local host=$1
  shift
  [[ $host =~ ^10\.77\.([0-9]+)\.[0-9]+$ ]] || die 2 "agent: '$host' is not a cluster address"
  id=${BASH_REMATCH[1]}
  on_host "$host" sh -c "$*"
}

run_mpirun() {
  local args=() passed=() v hf
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  [ $# -ge 2 ] || die 2 "mpirun: needs [MPIRUN ARGS] -- PROGRAM [ARGS]"
  shift
  need_id
  hf="$state_root/$id/hostfile"
  [ -f "$hf" ] || die 1 "no cluster $id (run '$prog up N' first)"
  for v in $(compgen -e | grep '^MELD_' || true); do passed+=(-x "$v"); done
  # plm_rsh_agent: this script instead of ssh. plm_rsh_no_tree_spawn: mpirun starts every daemon
  # itself (from the root namespace) rather than daemons starting each other. btl tcp,self: no
  # shared memory between ranks, which would bypass the links. *_if_include: MPI messages and
  # the daemons' out-of-band channel only on the cluster subnet (the hosts have no other
  # interface but lo; this keeps mpirun from offering its other addresses). --bind-to none:
  # every daemon thinks it has the machine's cores to itself and would pin its rank to core 0.
  exec mpirun --hostfile "$hf" \
    --mca plm_rsh_agent "$self agent" \
    --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self \
    --mca btl_tcp_if_include "$(subnet "$id")" \
    --mca oob_tcp_if_include "$(subnet "$id")" \
    --bind-to none \
    ${passed[@]+"${passed[@]}"} ${args[@]+"${args[@]}"} "$@"
}

run() {
  local upargs=() rc=0
  while [ $# -gt 0 ] && [ "$1" != -- ]; do upargs+=("$1"); shift; done
  [ $# -ge 2 ] || die 2 "run: needs N [up options] -- COMMAND [ARGS]"
  shift
  id=$(up ${upargs[@]+"${upargs[@]}"} --owner $$)
  export MELD_CLUSTER_ID=$id
  trap 'teardown "$id"' EXIT
  trap 'exit 130' INT TERM HUP
  "$@" || rc=$?
  exit "$rc"
}

list() {
  local d
  for d in "$state_root"/*/; do
    [ -d "$d" ] || continue
    echo "cluster $(basename "$d"): $(hosts_of "$(basename "$d")") hosts, owner $(cat "$d/owner" 2> /dev/null || echo '?')"
  done
}

id=${MELD_CLUSTER_ID:-}
if [ "${1:-}" = --id ]; then
  [ $# -ge 2 ] || die 2 "--id needs a value"
  id=$2
  shift 2
fi
[ $# -ge 1 ] || { usage >&2; exit 2; }
cmd=$1
shift
case $cmd in
  up) up "$@" ;;
  down) down "$@" ;;
  run) run "$@" ;;
  exec) [ $# -ge 2 ] || die 2 "exec: needs HOST COMMAND"; need_id; on_host "$@" ;;
  mpirun) run_mpirun "$@" ;;
  agent) agent "$@" ;;
  check) check ;;
  list) list ;;
  help | -h | --help) usage ;;
  *) die 2 "unknown command '$cmd' ('$prog help' for the usage)" ;;
esac
