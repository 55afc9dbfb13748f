#!/usr/bin/env bash
# Starts a local control plane on 127.0.0.1 (etcd, kube-apiserver, a kube-controller-manager
# running only the ClusterRole aggregation, namespace, garbage collector, service account and
# service account token controllers) and registers
# network-apiserver behind kube-apiserver's aggregation layer, the way a cluster would run it.
#
#   hack/local-up-cluster.sh        # make cluster-up
#   hack/local-up-cluster.sh down   # make cluster-down: stop everything, remove the state dir
#   hack/local-up-cluster.sh restart-apiserver   # stop network-apiserver, start it again with
#                                                # the same command line, wait for Available
#   hack/local-up-cluster.sh stop-apiserver      # stop network-apiserver only
#   hack/local-up-cluster.sh start-apiserver     # start it again, wait for Available
#
# Everything lives in LOCAL_CLUSTER_DIR (default _output/local-cluster): certificates,
# kubeconfigs, pid files, logs (*.log) and data. Fixed loopback ports, each overridable:
#   ETCD_PORT=32379 ETCD_PEER_PORT=32380 APISERVER_PORT=16443 NETWORK_APISERVER_PORT=8443
# etcd always uses TLS, for clients (kube-apiserver, network-apiserver, etcdctl: client
# certificates signed by the etcd CA in pki/etcd-ca.crt) and between members.
# The topology users run in production, on loopback:
#   ETCD_MEMBERS=3   etcd members; member i serves clients on ETCD_PORT+2i, peers on ETCD_PEER_PORT+2i
#                    (member 0 keeps the names etcd.pid, etcd.log; the others etcd-<i>.*)
#   REPLICAS=2       network-apiserver replicas sharing that etcd; replica i listens on
#                    NETWORK_APISERVER_PORT+i (replica 0 keeps the names network-apiserver.*, the
#                    others network-apiserver-<i>.*). The APIServices route to replica 0's port;
#                    every replica serves clients directly with the same serving certificate.
# restart-apiserver, stop-apiserver and start-apiserver act on every replica.
# The APIServices name service network-apiserver/network-apiserver, an ExternalName Service
# resolving to localhost, on port NETWORK_APISERVER_PORT, where network-apiserver listens.
# network-apiserver runs with --controllers=false (its controller would build bridges in this
# host's network namespace); NETWORK_APISERVER_ARGS adds arguments after the script's own, e.g.
#   NETWORK_APISERVER_ARGS="--controllers=true --backend-netns=/var/run/netns/demo --cni-conf-dir=/tmp/cni"
# KUBE_CONTROLLER_MANAGER=false leaves kube-controller-manager out (benchmarks: no extra load).
# KUBE_APISERVER_ARGS and KUBE_CONTROLLER_MANAGER_ARGS add arguments after the script's own (a
# later single-valued flag wins; a second --controllers adds to the list): hack/local-up-nodes.sh
# uses them to serve its nodes.
# kube-apiserver's command line is recorded in kube-apiserver.args like network-apiserver's, one
# argument a line, so that a tool can stop it (SIGTERM the pid in kube-apiserver.pid) and start
# it again the same way (writing the new pid back for cluster-down).
set -euo pipefail

# shellcheck source=lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"
# shellcheck source=lib/cluster.sh
source "$ROOT/hack/lib/cluster.sh"
NETWORK_APISERVER_ARGS=${NETWORK_APISERVER_ARGS:-}
KUBE_CONTROLLER_MANAGER=${KUBE_CONTROLLER_MANAGER:-true}
KUBE_APISERVER_ARGS=${KUBE_APISERVER_ARGS:-}
KUBE_CONTROLLER_MANAGER_ARGS=${KUBE_CONTROLLER_MANAGER_ARGS:-}
ETCD_MEMBERS=${ETCD_MEMBERS:-1}
REPLICAS=${REPLICAS:-1}
[[ $ETCD_MEMBERS =~ ^[1-9]$ ]] || die "ETCD_MEMBERS=$ETCD_MEMBERS: want 1 to 9"
[[ $REPLICAS =~ ^[1-9]$ ]] || die "REPLICAS=$REPLICAS: want 1 to 9"

# member_name I / replica_name I: the component name of etcd member I / network-apiserver replica I.
member_name() { if (($1 == 0)); then echo etcd; else echo "etcd-$1"; fi; }
replica_name() { if (($1 == 0)); then echo network-apiserver; else echo "network-apiserver-$1"; fi; }

# The processes, in start order; cluster-down stops kube-controller-manager, then the API
# servers, then etcd. Members and replicas beyond those of this invocation are listed too (up
# to 9 each), so that cluster-down stops a cluster started with more of them.
COMPONENTS=()
for ((i = 0; i < 9; i++)); do COMPONENTS+=("$(member_name "$i")"); done
COMPONENTS+=(kube-apiserver kube-controller-manager)
for ((i = 0; i < 9; i++)); do COMPONENTS+=("$(replica_name "$i")"); done

# stop_component NAME: SIGTERM the process in NAME.pid, wait up to 60s, then SIGKILL.
stop_component() { stop_pid "$STATE/$1.pid" 60; }

stop_all() {
  local i pids=()
  # kube-controller-manager first: its garbage collector and namespace controller watch Networks
  # through kube-apiserver, and network-apiserver waits (up to 60s) for open watches on SIGTERM.
  stop_component kube-controller-manager
  # Then the API servers at once (each takes seconds to shut down gracefully, and neither waits
  # for the other), then the etcd members at once; waiting for those stops only, not
  # for other background jobs of this shell (cluster-up's trap runs this too).
  for ((i = 0; i < 9; i++)); do
    stop_component "$(replica_name "$i")" &
    pids+=($!)
  done
  stop_component kube-apiserver &
  pids+=($!)
  wait "${pids[@]}"
  pids=()
  for ((i = 0; i < 9; i++)); do
    stop_component "$(member_name "$i")" &
    pids+=($!)
  done
  wait "${pids[@]}"
}

cluster_down() {
  stop_all
  # Only ever remove a directory this script made (it holds our marker).
  if [[ -f $STATE/.local-cluster ]]; then
    rm -rf "$STATE"
  elif [[ -e $STATE ]]; then
    log "not removing $STATE: it was not made by this script"
  fi
}

# start NAME ARGS...: run a binary in the background with its log and pid file in the state dir.
start() {
  local name=$1
  shift
  log "starting $name (log: $STATE/$name.log)"
  setsid "$@" >"$STATE/$name.log" 2>&1 </dev/null &
  echo $! >"$STATE/$name.pid"
}

# component_alive NAME: fail with its log's tail when NAME has exited.
component_alive() { alive "$STATE/$1.pid" "$STATE/$1.log"; }

# component_poll SECONDS NAME DESCRIPTION COMMAND...: poll COMMAND while NAME runs.
component_poll() { poll "$1" "$STATE/$2.pid" "$STATE/$2.log" "${@:3}"; }

# sign NAME CA SUBJECT [SANS] [USAGE]: a key and a certificate in pki/ signed by pki/CA.
sign() { pki_sign "$STATE/pki" "$1" "$STATE/pki/$2" "${@:3}"; }

# make_ca NAME CN: a CA in pki/.
make_ca() { pki_ca "$STATE/pki" "$1" "$2"; }

gen_pki() {
  mkdir -p "$STATE/pki"
  make_ca ca local-cluster-ca
  sign kube-apiserver ca /CN=kube-apiserver "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.0.0.1" serverAuth
  sign admin ca "/O=system:masters/CN=admin"
  # The ClusterRole aggregation controller patches view/edit/admin, which the bare
  # system:kube-controller-manager identity may not do without per-controller service accounts.
  sign kube-controller-manager ca "/O=system:masters/CN=system:kube-controller-manager"
  make_ca front-proxy-ca front-proxy-ca
  sign front-proxy-client front-proxy-ca /CN=front-proxy-client
  openssl genrsa -out "$STATE/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$STATE/pki/sa.key" -pubout -out "$STATE/pki/sa.pub" 2>/dev/null
  make_ca serving-ca network-apiserver-serving-ca
  sign network-apiserver serving-ca /CN=network-apiserver.network-apiserver.svc \
    "DNS:network-apiserver.network-apiserver.svc,DNS:network-apiserver.network-apiserver.svc.cluster.local,DNS:localhost,IP:127.0.0.1" serverAuth
  # etcd: its own CA; each member's certificate serves clients and peers and is the client
  # certificate it dials its peers with; one client certificate for its clients.
  make_ca etcd-ca local-cluster-etcd-ca
  local i
  for ((i = 0; i < ETCD_MEMBERS; i++)); do
    sign "etcd-member-$i" etcd-ca "/CN=etcd-member-$i" "DNS:localhost,IP:127.0.0.1" serverAuth,clientAuth
  done
  sign etcd-client etcd-ca /CN=etcd-client
}

# etcd_endpoints: the client URLs of every member, comma-separated.
etcd_endpoints() {
  local i eps=()
  for ((i = 0; i < ETCD_MEMBERS; i++)); do eps+=("https://127.0.0.1:$((ETCD_PORT + 2 * i))"); done
  local IFS=,
  echo "${eps[*]}"
}

# etcdctl ARGS...: the pinned etcdctl against this cluster's etcd, with its client certificate.
etcdctl() {
  "$BIN/etcdctl" --endpoints "$(etcd_endpoints)" --cacert "$STATE/pki/etcd-ca.crt" \
    --cert "$STATE/pki/etcd-client.crt" --key "$STATE/pki/etcd-client.key" "$@"
}

# start_etcd: every member, with TLS for clients and peers; waits until the cluster is healthy.
start_etcd() {
  local i initial=() name peer client
  for ((i = 0; i < ETCD_MEMBERS; i++)); do
    initial+=("$(member_name "$i")=https://127.0.0.1:$((ETCD_PEER_PORT + 2 * i))")
  done
  local cluster
  cluster=$(IFS=,; echo "${initial[*]}")
  for ((i = 0; i < ETCD_MEMBERS; i++)); do
    name=$(member_name "$i")
    client="https://127.0.0.1:$((ETCD_PORT + 2 * i))"
    peer="https://127.0.0.1:$((ETCD_PEER_PORT + 2 * i))"
    start "$name" "$BIN/etcd" --name "$name" --data-dir "$STATE/$name" \
      --listen-client-urls "$client" --advertise-client-urls "$client" \
      --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
      --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token local-cluster \
      --cert-file "$STATE/pki/etcd-member-$i.crt" --key-file "$STATE/pki/etcd-member-$i.key" \
      --trusted-ca-file "$STATE/pki/etcd-ca.crt" --client-cert-auth \
      --peer-cert-file "$STATE/pki/etcd-member-$i.crt" --peer-key-file "$STATE/pki/etcd-member-$i.key" \
      --peer-trusted-ca-file "$STATE/pki/etcd-ca.crt" --peer-client-cert-auth
  done
  component_poll 60 etcd "etcd health" etcdctl endpoint health
}

# kubeconfig FILE USER with the credential flags for kubectl config set-credentials.
kubeconfig() { write_kubeconfig "$1" "https://127.0.0.1:$APISERVER_PORT" "" "$STATE/pki/ca.crt" "${@:2}"; }

# start_network_apiserver: run every replica with the arguments cluster-up recorded.
start_network_apiserver() {
  local args name
  for name in "${COMPONENTS[@]}"; do
    [[ $name == network-apiserver* && -f $STATE/$name.args ]] || continue
    mapfile -t args <"$STATE/$name.args"
    start "$name" "${args[@]}"
  done
}

stop_network_apiserver() {
  local name
  for name in "${COMPONENTS[@]}"; do
    [[ $name != network-apiserver* ]] || stop_component "$name"
  done
}

# wait_replicas_ready: every replica but the first (the APIServices wait for that one) answers
# /readyz; they authenticate it like any request, with the admin client certificate.
wait_replicas_ready() {
  local name port
  for name in "${COMPONENTS[@]}"; do
    [[ $name == network-apiserver-* && -f $STATE/$name.args ]] || continue
    port=$(sed -n '/^--secure-port$/{n;p}' "$STATE/$name.args")
    component_poll 120 "$name" "$name /readyz" curl -sf --cacert "$STATE/pki/serving-ca.crt" \
      --cert "$STATE/pki/admin.crt" --key "$STATE/pki/admin.key" "https://127.0.0.1:$port/readyz"
  done
}

# wait_available: wait for both APIServices to be Available, failing if a server exits.
wait_available() {
  local name
  log "waiting for apiservice/v1.samplecrd.k8s.io to become Available"
  local deadline=$((SECONDS + 120))
  until admin_kubectl wait --for=condition=Available apiservice/v1.samplecrd.k8s.io apiservice/v1beta1.samplecrd.k8s.io --timeout=5s >/dev/null 2>&1; do
    for name in "${COMPONENTS[@]}"; do
      [[ $name != network-apiserver* || ! -f $STATE/$name.pid ]] || component_alive "$name"
    done
    component_alive kube-apiserver
    if ((SECONDS >= deadline)); then
      admin_kubectl get apiservice v1.samplecrd.k8s.io -o yaml >&2 || true
      die "apiservice/v1.samplecrd.k8s.io not Available after 120s; see $STATE/*.log"
    fi
  done
  wait_replicas_ready
}

# restart_apiserver: stop network-apiserver (if running) and start it again with the same
# command line, leaving etcd, kube-apiserver and kube-controller-manager alone.
restart_apiserver() {
  require_cluster
  stop_network_apiserver
  start_network_apiserver
  wait_available
  log "network-apiserver restarted"
}

require_cluster() {
  [[ -f $STATE/.local-cluster && -f $STATE/network-apiserver.args ]] || die "no local cluster in $STATE: run cluster-up"
}

cluster_up() {
  local b
  for b in etcd etcdctl kube-apiserver kube-controller-manager kubectl; do
    [[ -x $BIN/$b ]] || die "$BIN/$b is missing: run hack/build-tools.sh"
  done
  [[ -x $BIN/network-apiserver ]] || die "$BIN/network-apiserver is missing: run make build"
  cluster_down
  local i ports=("$APISERVER_PORT")
  for ((i = 0; i < ETCD_MEMBERS; i++)); do ports+=($((ETCD_PORT + 2 * i)) $((ETCD_PEER_PORT + 2 * i))); done
  for ((i = 0; i < REPLICAS; i++)); do ports+=($((NETWORK_APISERVER_PORT + i))); done
  require_free_ports "override with ETCD_PORT, ETCD_PEER_PORT, APISERVER_PORT, NETWORK_APISERVER_PORT" "${ports[@]}"
  mkdir -p "$STATE"
  touch "$STATE/.local-cluster"
  # A failed start leaves no process behind; the logs stay for a look.
  trap 'stop_all; log "cluster-up failed; logs are in $STATE"' EXIT
  gen_pki
  kubeconfig "$STATE/admin.kubeconfig" admin --client-certificate "$STATE/pki/admin.crt" \
    --client-key "$STATE/pki/admin.key" --embed-certs
  kubeconfig "$STATE/kube-controller-manager.kubeconfig" kube-controller-manager \
    --client-certificate "$STATE/pki/kube-controller-manager.crt" --client-key "$STATE/pki/kube-controller-manager.key" --embed-certs

  start_etcd

  local args
  printf '%s\n' "$BIN/kube-apiserver" \
    --etcd-servers "$(etcd_endpoints)" \
    --etcd-cafile "$STATE/pki/etcd-ca.crt" --etcd-certfile "$STATE/pki/etcd-client.crt" --etcd-keyfile "$STATE/pki/etcd-client.key" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --endpoint-reconciler-type none \
    --client-ca-file "$STATE/pki/ca.crt" \
    --tls-cert-file "$STATE/pki/kube-apiserver.crt" --tls-private-key-file "$STATE/pki/kube-apiserver.key" \
    --service-account-key-file "$STATE/pki/sa.pub" --service-account-signing-key-file "$STATE/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-cluster-ip-range 10.0.0.0/24 \
    --authorization-mode RBAC \
    --requestheader-client-ca-file "$STATE/pki/front-proxy-ca.crt" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User \
    --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$STATE/pki/front-proxy-client.crt" --proxy-client-key-file "$STATE/pki/front-proxy-client.key" \
    --enable-aggregator-routing=false >"$STATE/kube-apiserver.args"
  # shellcheck disable=SC2086 # split on purpose: one argument per word
  [[ -z $KUBE_APISERVER_ARGS ]] || printf '%s\n' $KUBE_APISERVER_ARGS >>"$STATE/kube-apiserver.args"
  mapfile -t args <"$STATE/kube-apiserver.args"
  start kube-apiserver "${args[@]}"
  component_poll 120 kube-apiserver "kube-apiserver /readyz" admin_kubectl get --raw /readyz

  # Aggregates the samplecrd-networks-* roles into view/edit/admin; empties and removes deleted
  # namespaces; collects dependents of deleted owners (Networks included); keeps each namespace's
  # default ServiceAccount and fills service account token Secrets, signed with the key
  # kube-apiserver signs with.
  local controllers=clusterrole-aggregation-controller,namespace-controller,garbage-collector-controller
  controllers+=,serviceaccount-controller,serviceaccount-token-controller
  if [[ $KUBE_CONTROLLER_MANAGER != false ]]; then
    start kube-controller-manager "$BIN/kube-controller-manager" \
      --kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
      --authentication-kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
      --authorization-kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
      --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
      --service-account-private-key-file "$STATE/pki/sa.key" --root-ca-file "$STATE/pki/ca.crt" \
      --controllers "$controllers" $KUBE_CONTROLLER_MANAGER_ARGS # split on purpose
  fi

  admin_kubectl apply -f "$ROOT/artifacts/deploy/namespace.yaml" -f "$ROOT/artifacts/deploy/rbac.yaml" >&2
  admin_kubectl apply -f "$ROOT/artifacts/local/service.yaml" >&2
  local ca_bundle
  ca_bundle=$(base64 -w0 <"$STATE/pki/serving-ca.crt")
  sed -e "s|caBundle: \"\"|caBundle: $ca_bundle|" -e "s|port: 443|port: $NETWORK_APISERVER_PORT|" \
    "$ROOT/artifacts/deploy/apiservice.yaml" >"$STATE/apiservice.yaml"
  admin_kubectl apply -f "$STATE/apiservice.yaml" >&2

  local token
  token=$(admin_kubectl create token network-apiserver -n network-apiserver --duration 24h)
  kubeconfig "$STATE/network-apiserver.kubeconfig" network-apiserver --token "$token"

  local name
  for ((i = 0; i < REPLICAS; i++)); do
    name=$(replica_name "$i")
    mkdir -p "$STATE/$name.data"
    # Recorded, one argument a line, so that restart-apiserver runs exactly the same command.
    # Every replica runs this build, so creates may trust the length records and write one VNI
    # key per Network and no gateway key (--allocation-guards=recorded, --vni-keys=single,
    # --gateway-keys=none, docs/allocation.md).
    printf '%s\n' "$BIN/network-apiserver" \
      --etcd-servers "$(etcd_endpoints)" --etcd-prefix /network-apiserver \
      --etcd-cafile "$STATE/pki/etcd-ca.crt" --etcd-certfile "$STATE/pki/etcd-client.crt" --etcd-keyfile "$STATE/pki/etcd-client.key" \
      --kubeconfig "$STATE/network-apiserver.kubeconfig" \
      --tls-cert-file "$STATE/pki/network-apiserver.crt" --tls-private-key-file "$STATE/pki/network-apiserver.key" \
      --bind-address 127.0.0.1 --secure-port "$((NETWORK_APISERVER_PORT + i))" \
      --controllers=false --template-namespace network-apiserver \
      --allocation-guards=recorded --vni-keys=single --gateway-keys=none \
      --data-dir "$STATE/$name.data" >"$STATE/$name.args"
    # shellcheck disable=SC2086 # split on purpose: one argument per word
    [[ -z $NETWORK_APISERVER_ARGS ]] || printf '%s\n' $NETWORK_APISERVER_ARGS >>"$STATE/$name.args"
  done
  start_network_apiserver
  wait_available
  [[ $KUBE_CONTROLLER_MANAGER == false ]] || component_alive kube-controller-manager
  trap - EXIT
  cat <<EOF
network-apiserver is serving behind kube-apiserver at https://127.0.0.1:$APISERVER_PORT
(state, logs and pid files in $STATE; stop with: make cluster-down). Try:

  export KUBECONFIG=$STATE/admin.kubeconfig
  $BIN/kubectl get networks
EOF
  if ((ETCD_MEMBERS > 1 || REPLICAS > 1)); then
    cat <<EOF

etcd: $ETCD_MEMBERS members at $(etcd_endpoints) (TLS; etcdctl needs --cacert $STATE/pki/etcd-ca.crt
--cert $STATE/pki/etcd-client.crt --key $STATE/pki/etcd-client.key).
network-apiserver: $REPLICAS replicas on ports $NETWORK_APISERVER_PORT..$((NETWORK_APISERVER_PORT + REPLICAS - 1)); the APIServices
route to the first, and each serves directly, e.g.
  $BIN/kubectl --server https://127.0.0.1:$((NETWORK_APISERVER_PORT + REPLICAS - 1)) --certificate-authority $STATE/pki/serving-ca.crt get networks
EOF
  fi
}

case ${1:-up} in
up) cluster_up ;;
down) cluster_down ;;
restart-apiserver) restart_apiserver ;;
stop-apiserver)
  require_cluster
  stop_network_apiserver
  ;;
start-apiserver)
  require_cluster
  start_network_apiserver
  wait_available
  ;;
*) die "usage: $0 [up|down|restart-apiserver|stop-apiserver|start-apiserver]" ;;
esac
