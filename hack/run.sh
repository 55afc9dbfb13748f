#!/usr/bin/env bash
# What `make run` runs once the binaries are built: network-apiserver standalone on 127.0.0.1:PORT
# with its data in DATA_DIR, and its bundled controller confined to a network namespace made for
# it, so that nothing a demo does reaches this machine's own network:
#
#   as root          the namespace DEMO_NETNS (default network-apiserver-demo) is created, the
#                    controller acts there (--backend-netns) and writes its CNI configuration
#                    lists to DATA_DIR/cni/net.d (host-local's leases to DATA_DIR/cni/ipam); a
#                    Network's bridge is made there by its first pod's ADD (the samplecrd-bridge
#                    plugin in BIN/cni), or at once with CONTROLLER_FLAGS=--bridge-on-attach=false;
#                    the namespace is deleted when the
#                    server exits (Ctrl-C, SIGTERM, SIGHUP). A namespace left by a run that was
#                    killed is deleted and made anew at the next start.
#   without root     no namespace; the server finds it lacks CAP_NET_ADMIN, says so once and
#                    serves the API alone (Networks stay Ready=Unknown with the reason).
#   UNSAFE_HOST_NETWORK=1
#                    no namespace: the controller acts on this machine's own network and writes
#                    to /etc/cni/net.d (the binary's defaults, what the DaemonSet runs).
#
# CONTROLLER_FLAGS come last and win (--controllers=false, or your own --backend-netns, means no
# demo namespace). Signals are forwarded to the server, which runs in a session of its own, so
# that it gets each once and shuts down gracefully; Ctrl-C again later makes it exit at once.
#
# Environment (the Makefile sets it): BIN DATA_DIR PORT CONTROLLER_FLAGS DEMO_NETNS UNSAFE_HOST_NETWORK
set -o errexit -o nounset -o pipefail
# shellcheck source=lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"
DATA_DIR=${DATA_DIR:-${ROOT}/.data}
PORT=${PORT:-8443}
CONTROLLER_FLAGS=${CONTROLLER_FLAGS:-}
DEMO_NETNS=${DEMO_NETNS:-network-apiserver-demo}
UNSAFE_HOST_NETWORK=${UNSAFE_HOST_NETWORK:-}

read -r -a extra <<<"${CONTROLLER_FLAGS}"
# One server, started on its own: no replica of an older build writes beside it, so creates may
# trust the length records, write one VNI key per Network and no gateway key (docs/allocation.md,
# "The length record", "One VNI key per Network", "Networks without a gateway key").
args=(--data-dir "${DATA_DIR}" --bind-address 127.0.0.1 --secure-port "${PORT}" --allocation-guards=recorded --vni-keys=single --gateway-keys=none)

# has_cap N: whether this shell's effective capability set holds capability number N.
has_cap() {
  local eff
  eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status 2>/dev/null) || return 1
  [ -n "${eff}" ] && (( (16#${eff} >> $1) & 1 ))
}
CAP_NET_ADMIN=12 CAP_SYS_ADMIN=21

netns=""
case "${UNSAFE_HOST_NETWORK}" in
  "") ;;
  1) ;;
  *) log "UNSAFE_HOST_NETWORK must be 1 (or unset), not '${UNSAFE_HOST_NETWORK}'"; exit 2 ;;
esac
own_netns=false
for f in "${extra[@]}"; do
  case "${f}" in
    --controllers=false | --backend-netns | --backend-netns=*) own_netns=true ;;
  esac
done

if [ "${UNSAFE_HOST_NETWORK}" = 1 ]; then
  info "UNSAFE_HOST_NETWORK=1: the controller acts on this machine's own network and writes to /etc/cni/net.d"
elif ${own_netns}; then
  : # CONTROLLER_FLAGS decide where the controller acts, if it runs at all
elif ! has_cap "${CAP_NET_ADMIN}"; then
  # The server sees the same and says so; its configuration lists would go to the data dir.
  args+=(--cni-conf-dir "${DATA_DIR}/cni/net.d")
elif ! has_cap "${CAP_SYS_ADMIN}"; then
  log "creating the network namespace ${DEMO_NETNS} needs CAP_SYS_ADMIN, which this shell lacks:" \
    "the controller stays off (UNSAFE_HOST_NETWORK=1 runs it on this machine's network)"
  args+=(--controllers=false)
else
  netns=${DEMO_NETNS}
  "${ROOT}/hack/install-deps.sh" netns
  # One run per namespace at a time. The server inherits the lock, so it is held until the last
  # process of this run has exited, however it ended.
  lockdir=/run/lock
  [ -d "${lockdir}" ] || lockdir=/run
  exec {lock}>"${lockdir}/${netns}.lock"
  if ! flock --nonblock "${lock}"; then
    die "another make run is using the network namespace ${netns}; stop it, or give this one" \
      "another namespace with DEMO_NETNS=... (and another PORT and DATA_DIR)"
  fi
  if [ -e "/var/run/netns/${netns}" ]; then
    ip netns delete "${netns}"
    info "deleted the network namespace ${netns} that an earlier run left behind"
  fi
  ip netns add "${netns}"
  info "the controller is confined to the network namespace ${netns} (ip -n ${netns} link)," \
    "its CNI configuration lists go to ${DATA_DIR}/cni/net.d; a Network's bridge is made by its first" \
    "pod's ADD (plugins in ${BIN}/cni), or at once with CONTROLLER_FLAGS=--bridge-on-attach=false"
  args+=(--backend-netns "/var/run/netns/${netns}" --cni-conf-dir "${DATA_DIR}/cni/net.d"
    --cni-ipam-data-dir "${DATA_DIR}/cni/ipam")
fi

server=""
cleanup() {
  if [ -n "${netns}" ] && [ -e "/var/run/netns/${netns}" ]; then
    ip netns delete "${netns}" && info "deleted the network namespace ${netns}"
  fi
}
trap cleanup EXIT
# A signal sent to the whole process group reaches this script twice, directly and from make
# (which passes SIGTERM on): the same signal again within two seconds counts once.
last_signal="" last_at=-10
forward() {
  [ -n "${server}" ] || return 0
  if [ "$1" = "${last_signal}" ] && ((SECONDS - last_at < 2)); then return 0; fi
  last_signal=$1 last_at=${SECONDS}
  kill -s "$1" "${server}" 2>/dev/null || true
}
trap 'forward INT' INT
trap 'forward TERM' TERM
trap 'forward TERM' HUP

# setsid: the terminal's Ctrl-C reaches make and this script, not the server too (the server
# takes a second signal as a demand to exit at once). --pdeathsig: if this script is killed, the
# server is told to stop.
setsid setpriv --pdeathsig TERM -- "${BIN}/network-apiserver" "${args[@]}" "${extra[@]}" &
server=$!
# wait returns early for each trapped signal; wait again until the server has exited.
while :; do
  status=0
  wait "${server}" || status=$?
  kill -0 "${server}" 2>/dev/null || break
done
if [ "${status}" -gt 128 ]; then
  # The last wait may have been cut short by a signal just before the server exited.
  again=0
  wait "${server}" 2>/dev/null || again=$?
  [ "${again}" -eq 127 ] || status=${again}
fi
[ "${status}" -eq 0 ] || log "network-apiserver exited with status ${status}"
exit "${status}"
