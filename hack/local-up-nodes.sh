#!/usr/bin/env bash
# The local cluster of hack/local-up-cluster.sh plus NODES real Kubernetes nodes, each a kubelet,
# containerd (with runc and the CNI bridge plugin) and kube-proxy, with kube-scheduler and a
# kube-proxy beside the control plane. Nothing of it touches this host's network: no interface,
# route, iptables rule or sysctl of the host's network namespace changes.
#
#   hack/local-up-nodes.sh up       # make cluster-up NODES=2
#   hack/local-up-nodes.sh down     # make cluster-down: stop everything, remove the state dir
#   hack/local-up-nodes.sh status   # the nodes' processes and their resident memory
#   hack/local-up-nodes.sh check    # can this machine run nodes? (if not, says why and fails)
#   hack/local-up-nodes.sh stop-kubelet I | start-kubelet I   # node I's kubelet only (its pods
#                                   # keep running, the node goes NotReady)
#   hack/local-up-nodes.sh restart-apiserver|stop-apiserver|start-apiserver
#                                   # local-up-cluster.sh's commands, run beside the control plane
#
# Layout (IPv4 only):
#   control plane   a network namespace of its own, where hack/local-up-cluster.sh runs unchanged
#                   on its loopback (etcd, kube-apiserver, kube-controller-manager,
#                   network-apiserver) and kube-scheduler and kube-proxy run beside it. Its bridge
#                   "nodes" (10.200.0.1/24) links the nodes; it routes each node's pod range.
#                   kube-apiserver also listens on 10.200.0.1 and advertises it (the `kubernetes`
#                   Service's endpoint). A forwarder (hack/local-nodes/forward) listens on this
#                   host's 127.0.0.1 at APISERVER_PORT, ETCD_PORT and NETWORK_APISERVER_PORT and
#                   connects inside the namespace, so admin.kubeconfig works from the host as usual.
#   node i (1..N)   named node<i>: a network namespace (eth0 10.200.0.<10+i>, default route via
#                   10.200.0.1) and a mount namespace in which /run, /var/lib and /var/log are the
#                   node's own directories and /etc is an overlay of the host's, so that whatever a
#                   node writes to those paths (containerd's and the kubelet's state, hostPath
#                   volumes such as /etc/cni/net.d, /var/lib/cni, pod logs) stays in its state
#                   dir; the kubelet's global sysctls are files there holding the values it wants.
#                   Pods get 10.201.<i>.0/24 on bridge cni0 (the CNI bridge and host-local plugins).
#                   containerd's second runtime handler, samplecrd (RuntimeClass samplecrd), runs
#                   runc with the CNI configurations of /etc/cni/samplecrd.d, at most two: a copy
#                   of the primary one (eth0) and what a network-apiserver agent with
#                   --cni-conf-dir /etc/cni/samplecrd.d writes there (eth1).
#   cgroups         every process of the cluster is in a cgroup of its own, lc-<hash>-cp or
#                   lc-<hash>-node<i> (the hash names the state dir), which is also the kubelet's
#                   cgroupRoot: down kills what is in them and removes them.
#   images          local/pause:1 (the sandbox image), local/test:1 (an HTTP server answering
#                   with its hostname, hack/local-nodes/serve), local/coredns:1 and local/etcd:v3.7.3
#                   (the pinned etcd and etcdctl, entrypoint etcd), built without a daemon
#                   (hack/local-nodes/image) and imported into each node's containerd with
#                   `ctr images import`; nothing is ever pulled. Pods use imagePullPolicy: Never.
#                   IMAGES="a.tar b.tar" imports more.
#   DNS             CoreDNS (kubernetes plugin only, hack/tools/cmd/coredns) as a Deployment,
#                   Service kube-dns at 10.0.0.10, the kubelets' clusterDNS; domain cluster.local.
# LOCAL_NETWORK_APISERVER=false: no network-apiserver of local-up-cluster.sh's (it is stopped, its
# APIServices, Service, RBAC and namespaces deleted), for deploying it onto the nodes instead
# (kubectl apply -k artifacts/deploy).
# State: LOCAL_CLUSTER_DIR (default _output/local-cluster), the nodes under nodes/node<i>/ (the
# host's view of the node's /run, /var/lib, /var/log and /etc upper layer, configurations, logs).
# Needs root, cgroup v1 (or v2) with the pids controller, overlayfs, and the Debian packages
# containerd, runc, iptables, nftables and conntrack (hack/install-deps.sh node).
set -euo pipefail

# shellcheck source=lib/init.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/init.sh"
# shellcheck source=lib/cluster.sh
source "$ROOT/hack/lib/cluster.sh"
# shellcheck source=lib/cgroups.sh
source "$ROOT/hack/lib/cgroups.sh"
NODES=${NODES:-2}
IMAGES=${IMAGES:-}
LOCAL_NETWORK_APISERVER=${LOCAL_NETWORK_APISERVER:-true}
# Where the helper binaries and the images are built.
TOOLS=$ROOT/_output/local-nodes
NODES_DIR=$STATE/nodes
CP_IP=10.200.0.1
CLUSTER_CIDR=10.201.0.0/16
# hack/local-up-cluster.sh's --service-cluster-ip-range
SERVICE_CIDR=10.0.0.0/24
# The kube-dns Service's address (hack/local-nodes/coredns.yaml)
CLUSTER_DNS=10.0.0.10
[[ $NODES =~ ^[1-9]$ ]] || die "NODES=$NODES: want 1 to 9"
export LOCAL_CLUSTER_DIR=$STATE BIN

node_ip() { echo "10.200.0.$((10 + $1))"; }
pod_cidr() { echo "10.201.$1.0/24"; }

# The cgroups: one prefix per state dir, so that two clusters never share one.
CG_PREFIX=lc-$(echo -n "$STATE" | sha256sum | cut -c1-8)
# start_bg NAME LOG CGROUP CMD...: run CMD in the background in CGROUP, with its pid in
# NODES_DIR/NAME.pid. CMD may be nsenter or unshare: they exec, so the pid stays the same.
start_bg() {
  local name=$1 logf=$2 cg=$3
  shift 3
  (in_cgroup "$cg" setsid "$@" >"$logf" 2>&1 </dev/null) &
  echo $! >"$NODES_DIR/$name.pid"
}

# sign NAME SUBJECT [SANS] [USAGE]: a key and certificate in NODES_DIR/pki signed by the cluster
# CA that hack/local-up-cluster.sh made.
sign() { pki_sign "$NODES_DIR/pki" "$1" "$STATE/pki/ca" "${@:2}"; }

# kubeconfig FILE SERVER CERTNAME: a kubeconfig for the client certificate CERTNAME. The server
# certificate names "kubernetes", not 10.200.0.1: tls-server-name says which name to check.
kubeconfig() {
  local cert=$NODES_DIR/pki/$3
  write_kubeconfig "$1" "$2" kubernetes "$STATE/pki/ca.crt" user --client-certificate "$cert.crt" \
    --client-key "$cert.key" --embed-certs
}

# kube_proxy_config FILE KUBECONFIG HOSTNAME ADDRESS [BIND_ADDRESS]: a kube-proxy configuration
# (iptables mode) for the host HOSTNAME whose NodePorts listen on ADDRESS.
kube_proxy_config() {
  cat >"$1" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $2
hostnameOverride: $3
${5:+bindAddress: $5
}clusterCIDR: $CLUSTER_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$4/32"]
# conntrack's table size and timeouts are global: leave them alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

# build: the helper binaries and the images (Go's cache makes a second run quick).
build() {
  local b
  for b in kubelet kube-proxy kube-scheduler coredns kubectl cni/bridge cni/host-local cni/loopback cni/portmap; do
    [[ -x $BIN/$b ]] || die "$BIN/$b is missing: run hack/build-tools.sh kubelet kube-proxy kube-scheduler coredns cni"
  done
  for b in containerd containerd-shim-runc-v2 runc ctr iptables conntrack nsenter unshare openssl; do
    command -v "$b" >/dev/null || die "$b is missing: run hack/install-deps.sh node"
  done
  CGO_ENABLED=0 go build -C "$ROOT/hack/local-nodes" -trimpath -o "$TOOLS/" ./forward ./image ./pause ./serve
  "$TOOLS/image" -tag local/pause:1 -out "$TOOLS/images/pause.tar" -file /pause="$TOOLS/pause"
  "$TOOLS/image" -tag local/test:1 -out "$TOOLS/images/test.tar" -file /serve="$TOOLS/serve"
  "$TOOLS/image" -tag local/coredns:1 -out "$TOOLS/images/coredns.tar" -file /coredns="$BIN/coredns"
  "$TOOLS/image" -tag local/etcd:v3.7.3 -out "$TOOLS/images/etcd.tar" -file /usr/local/bin/etcd="$BIN/etcd" \
    -file /usr/local/bin/etcdctl="$BIN/etcdctl"
}

# The kubelet's global sysctls (pkg/kubelet/cm: setupKernelTunables) and the values it wants;
# inside a node they are files bind-mounted over /proc/sys, so it finds them right and writes nothing.
KUBELET_SYSCTLS=(vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
  kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000)

# node_up I: start node I and wait until its containerd serves.
node_up() {
  local i=$1 name=node$1 d=$NODES_DIR/node$1 ip cidr holder cg=$CG_PREFIX-node$1
  ip=$(node_ip "$i")
  cidr=$(pod_cidr "$i")
  mkdir -p "$d"/{run,var/lib,var/log,etc/upper/cni/net.d,etc/upper/cni/samplecrd.d,etc/work,sysctl}
  cgroup_make "$cg"

  # The node's namespaces, held by a process that does nothing else.
  start_bg "$name-holder" "$d/holder.log" "$cg" unshare --net --mount --propagation slave sleep infinity
  holder=$(<"$NODES_DIR/$name-holder.pid")
  # Only once unshare has made the new mounts slaves (then it runs sleep) may anything be mounted
  # there: before, a mount would propagate to the host.
  wait_exec "$holder" sleep
  [[ $(readlink "/proc/$holder/ns/net") != "$(readlink /proc/self/ns/net)" &&
    $(readlink "/proc/$holder/ns/mnt") != "$(readlink /proc/self/ns/mnt)" ]] || die "$name: no namespaces of its own"

  # Network: eth0 on the control plane's bridge; created from inside the two namespaces, so that
  # neither end ever exists in the host's.
  nsenter -t "$holder" -n ip link add eth0 type veth peer name "$name" netns "$(<"$NODES_DIR/cp-holder.pid")"
  cp_exec ip link set "$name" master nodes up
  cp_exec ip route add "$cidr" via "$ip"
  nsenter -t "$holder" -n sh -c "ip link set lo up && ip addr add $ip/24 dev eth0 && ip link set eth0 up &&
    ip route add default via $CP_IP &&
    sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.route_localnet=1"

  # Pods: bridge cni0, a /24 per node, routed by the control plane.
  cat >"$d/etc/upper/cni/net.d/10-nodes.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "nodes",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  # The runtime handler samplecrd's directory (containerd.toml below): the primary configuration
  # first (eth0), then the one configuration list a network-apiserver agent writes there (its
  # --cni-conf-dir /etc/cni/samplecrd.d) as the pod's second interface. Written before the
  # overlay is mounted, like the primary one.
  cp "$d/etc/upper/cni/net.d/10-nodes.conflist" "$d/etc/upper/cni/samplecrd.d/10-nodes.conflist"
  local s sysctl_mounts=""
  for s in "${KUBELET_SYSCTLS[@]}"; do
    mkdir -p "$d/sysctl/$(dirname "${s%%=*}")"
    echo "${s#*=}" >"$d/sysctl/${s%%=*}"
    sysctl_mounts+="mount --bind $d/sysctl/${s%%=*} /proc/sys/${s%%=*} && "
  done
  nsenter -t "$holder" -m sh -c "mount --bind $d/run /run && mount --bind $d/var/lib /var/lib &&
    mount --bind $d/var/log /var/log &&
    mount -t overlay overlay -o lowerdir=/etc,upperdir=$d/etc/upper,workdir=$d/etc/work /etc &&
    ${sysctl_mounts} true"

  # containerd: its default paths (/var/lib/containerd, /run/containerd) are the node's own.
  cat >"$d/containerd.toml" <<EOF
version = 2
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/local/pause:1"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  # Without CAP_SYS_RESOURCE (often missing from root's bounding set in a VM or container) runc
  # cannot apply the negative oom_score_adj the kubelet asks for: clamp it to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
    # RuntimeClass samplecrd: runc as above, with two CNI configurations from a directory of its own.
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.samplecrd]
      runtime_type = "io.containerd.runc.v2"
      cni_conf_dir = "/etc/cni/samplecrd.d"
      cni_max_conf_num = 2
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.samplecrd.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$BIN/cni"
    conf_dir = "/etc/cni/net.d"
EOF
  start_bg "$name-containerd" "$d/containerd.log" "$cg" nsenter -t "$holder" -m -n containerd --config "$d/containerd.toml"
  local sock=$d/run/containerd/containerd.sock
  poll 30 "$NODES_DIR/$name-containerd.pid" "$d/containerd.log" "$name's containerd on $sock" ctr --address "$sock" version
  local img
  for img in "$TOOLS/images/pause.tar" "$TOOLS/images/test.tar" "$TOOLS/images/coredns.tar" "$TOOLS/images/etcd.tar" $IMAGES; do
    ctr --address "$sock" -n k8s.io images import "$img" >/dev/null
  done

  # kubelet and kube-proxy, with certificates signed by the cluster CA.
  sign "$name" "/O=system:nodes/CN=system:node:$name"
  sign "$name-serving" "/CN=$name" "DNS:$name,IP:$ip" serverAuth
  kubeconfig "$d/kubelet.kubeconfig" "https://$CP_IP:$APISERVER_PORT" "$name"
  kubeconfig "$d/kube-proxy.kubeconfig" "https://$CP_IP:$APISERVER_PORT" kube-proxy
  cat >"$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$cg
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: $ip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
tlsCertFile: $NODES_DIR/pki/$name-serving.crt
tlsPrivateKeyFile: $NODES_DIR/pki/$name-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization:
  mode: Webhook
resolvConf: /etc/resolv.conf
clusterDNS: [$CLUSTER_DNS]
clusterDomain: cluster.local
failSwapOn: false
protectKernelDefaults: false
serializeImagePulls: false
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "2%"
  imagefs.available: "2%"
# The images are imported, never pulled: garbage collection must not remove them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  start_kubelet "$i"
  kube_proxy_config "$d/kube-proxy.yaml" "$d/kube-proxy.kubeconfig" "$name" "$ip"
  start_bg "$name-kube-proxy" "$d/kube-proxy.log" "$cg" nsenter -t "$holder" -m -n "$BIN/kube-proxy" --config "$d/kube-proxy.yaml"
}

# start_kubelet I: node I's kubelet (again after stop-kubelet: it appends to its log).
start_kubelet() {
  local name=node$1 d=$NODES_DIR/node$1
  (in_cgroup "$CG_PREFIX-$name" setsid nsenter -t "$(<"$NODES_DIR/$name-holder.pid")" -m -n "$BIN/kubelet" \
    --config "$d/kubelet.yaml" --kubeconfig "$d/kubelet.kubeconfig" --hostname-override "$name" \
    --node-ip "$(node_ip "$1")" >>"$d/kubelet.log" 2>&1 </dev/null) &
  echo $! >"$NODES_DIR/$name-kubelet.pid"
}

# wait_exec PID COMM: wait until process PID runs COMM (it got there through exec).
wait_exec() {
  local k
  for ((k = 0; k < 100; k++)); do
    [[ $(cat "/proc/$1/comm" 2>/dev/null) != "$2" ]] || return 0
    kill -0 "$1" 2>/dev/null || die "process $1 exited before running $2"
    sleep 0.05
  done
  die "process $1 does not run $2"
}

# cp_exec CMD...: run CMD in the control plane's network namespace.
cp_exec() {
  local holder
  holder=$(<"$NODES_DIR/cp-holder.pid")
  [[ $(readlink "/proc/$holder/ns/net") != "$(readlink /proc/self/ns/net)" ]] || die "the control plane's holder is not in a namespace of its own"
  nsenter -t "$holder" -n "$@"
}

cluster_up() {
  local start=$SECONDS i
  build
  cluster_down
  require_free_ports "override with APISERVER_PORT, ETCD_PORT, NETWORK_APISERVER_PORT" \
    "$APISERVER_PORT" "$ETCD_PORT" "$NETWORK_APISERVER_PORT"
  case $STATE/ in
  /run/* | /var/lib/* | /var/log/* | /etc/*) die "LOCAL_CLUSTER_DIR=$STATE: a node replaces /run, /var/lib, /var/log and /etc; put the state elsewhere" ;;
  esac
  local cg=$CG_PREFIX-cp
  cgroup_make "$cg"
  trap 'cgroup_destroy "$CG_PREFIX-cp" || true; log "cluster-up failed"' EXIT

  # The control plane, in a network namespace of its own. kube-apiserver also listens on the
  # nodes' bridge, advertises that address, and talks to kubelets (logs, exec) with the admin
  # client certificate; kube-controller-manager adds what nodes and workloads need.
  local controllers=deployment-controller,replicaset-controller,daemonset-controller,statefulset-controller
  controllers+=,job-controller,endpoints-controller,endpointslice-controller,node-lifecycle-controller
  controllers+=,taint-eviction-controller,pod-garbage-collector-controller,disruption-controller
  controllers+=,root-ca-certificate-publisher-controller,persistentvolume-binder-controller,ttl-controller
  controllers+=,persistentvolume-protection-controller,persistentvolumeclaim-protection-controller
  (
    export KUBE_APISERVER_ARGS="--bind-address 0.0.0.0 --advertise-address $CP_IP --endpoint-reconciler-type lease
      --kubelet-client-certificate $STATE/pki/admin.crt --kubelet-client-key $STATE/pki/admin.key
      --kubelet-preferred-address-types InternalIP"
    export KUBE_CONTROLLER_MANAGER_ARGS="--controllers $controllers --node-monitor-grace-period 20s"
    in_cgroup "$cg" unshare --net sh -c 'ip link set lo up && exec "$0" up' "$ROOT/hack/local-up-cluster.sh"
  ) >&2 || die "the control plane did not start"
  local cp_up=$SECONDS
  mkdir -p "$NODES_DIR"
  touch "$NODES_DIR/.local-nodes"
  trap 'cluster_down; log "cluster-up failed"' EXIT

  # Hold the control plane's namespace; the bridge to the nodes; the host's way in.
  local cp_ns
  cp_ns=$(readlink "/proc/$(<"$STATE/kube-apiserver.pid")/ns/net")
  [[ $cp_ns != "$(readlink /proc/self/ns/net)" ]] || die "kube-apiserver runs in the host's network namespace"
  start_bg cp-holder "$NODES_DIR/cp-holder.log" "$cg" nsenter --net="/proc/$(<"$STATE/kube-apiserver.pid")/ns/net" sleep infinity
  # Until nsenter has entered the namespace, its /proc/PID/ns/net is the host's.
  wait_exec "$(<"$NODES_DIR/cp-holder.pid")" sleep
  [[ $(readlink "/proc/$(<"$NODES_DIR/cp-holder.pid")/ns/net") == "$cp_ns" ]] || die "the holder is not in the control plane's namespace"
  # The route for the service range only gets packets to kube-proxy's rules, which send them on.
  cp_exec sh -c "ip link add nodes type bridge && ip addr add $CP_IP/24 dev nodes && ip link set nodes up &&
    ip route add $SERVICE_CIDR dev nodes &&
    sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.route_localnet=1"
  start_bg forward "$NODES_DIR/forward.log" "$cg" "$TOOLS/forward" -netns "/proc/$(<"$NODES_DIR/cp-holder.pid")/ns/net" \
    "127.0.0.1:$APISERVER_PORT" "127.0.0.1:$ETCD_PORT" "127.0.0.1:$NETWORK_APISERVER_PORT"
  poll 10 "$NODES_DIR/forward.pid" "$NODES_DIR/forward.log" "kube-apiserver through the forwarder" admin_kubectl get --raw /readyz

  if [[ $LOCAL_NETWORK_APISERVER == false ]]; then
    (in_cgroup "$cg" nsenter --net="/proc/$(<"$NODES_DIR/cp-holder.pid")/ns/net" "$ROOT/hack/local-up-cluster.sh" stop-apiserver)
    admin_kubectl delete apiservice v1.samplecrd.k8s.io v1beta1.samplecrd.k8s.io >/dev/null
    admin_kubectl delete --wait --timeout 120s -f "$ROOT/artifacts/local/service.yaml" -f "$ROOT/artifacts/deploy/rbac.yaml" \
      -f "$ROOT/artifacts/deploy/namespace.yaml" >/dev/null
    log "network-apiserver stopped and unregistered (LOCAL_NETWORK_APISERVER=false)"
  fi

  # Who the nodes are: RBAC's system:node role for the group system:nodes (no Node authorizer
  # here); kube-proxy and kube-scheduler have their default bindings.
  admin_kubectl create clusterrolebinding local-nodes --clusterrole system:node --group system:nodes >/dev/null
  sign kube-proxy /CN=system:kube-proxy
  sign kube-scheduler /CN=system:kube-scheduler
  kubeconfig "$NODES_DIR/kube-scheduler.kubeconfig" "https://127.0.0.1:$APISERVER_PORT" kube-scheduler
  kubeconfig "$NODES_DIR/kube-proxy-cp.kubeconfig" "https://127.0.0.1:$APISERVER_PORT" kube-proxy
  start_bg kube-scheduler "$NODES_DIR/kube-scheduler.log" "$cg" nsenter --net="/proc/$(<"$NODES_DIR/cp-holder.pid")/ns/net" \
    "$BIN/kube-scheduler" --kubeconfig "$NODES_DIR/kube-scheduler.kubeconfig" --leader-elect=false --secure-port 0
  # kube-proxy beside the control plane, so that kube-apiserver reaches Services' cluster IPs (an
  # APIService or webhook backed by a Service) as it does on a real control-plane node. Its
  # iptables rules are in the control plane's namespace; it gets a /run of its own (xtables.lock).
  # It finds no Node named control-plane, waits 30s for one, then programs its rules.
  mkdir -p "$NODES_DIR/cp-run"
  kube_proxy_config "$NODES_DIR/kube-proxy-cp.yaml" "$NODES_DIR/kube-proxy-cp.kubeconfig" control-plane "$CP_IP" "$CP_IP"
  start_bg kube-proxy-cp "$NODES_DIR/kube-proxy-cp.log" "$cg" nsenter --net="/proc/$(<"$NODES_DIR/cp-holder.pid")/ns/net" \
    unshare --mount --propagation slave sh -c "mount --bind $NODES_DIR/cp-run /run && exec $BIN/kube-proxy --config $NODES_DIR/kube-proxy-cp.yaml"

  for ((i = 1; i <= NODES; i++)); do
    log "starting node$i (logs: $NODES_DIR/node$i/*.log)"
    node_up "$i"
  done
  local nodes_started=$SECONDS
  for ((i = 1; i <= NODES; i++)); do
    local deadline=$((SECONDS + 120))
    until admin_kubectl wait --for=condition=Ready "node/node$i" --timeout=5s >/dev/null 2>&1; do
      alive "$NODES_DIR/node$i-kubelet.pid" "$NODES_DIR/node$i/kubelet.log"
      alive "$NODES_DIR/node$i-containerd.pid" "$NODES_DIR/node$i/containerd.log"
      ((SECONDS < deadline)) || die "node$i not Ready after 120s; see $NODES_DIR/node$i/kubelet.log"
    done
  done
  local nodes_ready=$SECONDS
  # The nodes' second runtime handler, for pods that also join a Network (docs/operations.md).
  admin_kubectl apply -f - >/dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: samplecrd}
handler: samplecrd
EOF
  # Cluster DNS, as a Deployment on the nodes.
  admin_kubectl apply -f "$ROOT/hack/local-nodes/coredns.yaml" >/dev/null
  admin_kubectl -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null ||
    die "CoreDNS did not become ready: kubectl -n kube-system describe pods -l k8s-app=kube-dns"
  alive "$NODES_DIR/kube-scheduler.pid" "$NODES_DIR/kube-scheduler.log"
  alive "$NODES_DIR/kube-proxy-cp.pid" "$NODES_DIR/kube-proxy-cp.log"
  trap - EXIT
  log "control plane up in $((cp_up - start))s; $NODES nodes started in $((nodes_started - cp_up))s, Ready $((nodes_ready - nodes_started))s later; DNS ready $((SECONDS - nodes_ready))s after"
  cat <<EOF
network-apiserver is serving behind kube-apiserver at https://127.0.0.1:$APISERVER_PORT, with $NODES
real nodes (state, logs and pid files in $STATE; stop with: make cluster-down). Try:

  export KUBECONFIG=$STATE/admin.kubeconfig
  $BIN/kubectl get nodes
  $BIN/kubectl create deployment test --image local/test:1 --replicas 2   # images: local/pause:1, local/test:1
EOF
}

# node_down I: kill everything of node I at once (the kubelet would only stop pods that are going
# anyway); its namespaces go with the last process in them.
node_down() {
  local name=node$1
  cgroup_destroy "$CG_PREFIX-$name"
  rm -f "$NODES_DIR/$name"-*.pid
}

cluster_down() {
  local h d start=$SECONDS
  # Every node cgroup of this state dir, also of nodes a crashed run did not record.
  for d in "$(track_hierarchy)/$CG_PREFIX"-node*; do
    [[ -d $d ]] || continue
    node_down "${d##*-node}"
  done
  for h in kube-scheduler kube-proxy-cp forward; do stop_pid "$NODES_DIR/$h.pid" 10; done
  # A node's mounts live in its own mount namespace; none may show here before the files go.
  if grep -qF " $STATE/" /proc/self/mountinfo; then
    die "mounts under $STATE remain; not removing it"
  fi
  local nodes_down=$SECONDS
  "$ROOT/hack/local-up-cluster.sh" down
  cgroup_destroy "$CG_PREFIX-cp"
  log "down: nodes in $((nodes_down - start))s, control plane in $((SECONDS - nodes_down))s"
}

# status: each node's processes with their resident memory.
status() {
  local d pid comm rss
  [[ -d $NODES_DIR ]] || die "no nodes in $STATE"
  for d in "$(track_hierarchy)/$CG_PREFIX"-*; do
    [[ -d $d ]] || continue
    echo "${d##*/}:"
    for pid in $(cgroup_pids "${d##*/}"); do
      comm=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
      rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
      printf '  %-8s %-28s %8s KiB\n' "$pid" "$comm" "${rss:-0}"
    done
  done
}

# check: whether this machine can run nodes; if not, say why and fail.
check() {
  local b why=()
  [[ $(id -u) == 0 ]] || why+=("not root")
  for b in containerd containerd-shim-runc-v2 runc ctr iptables nft conntrack nsenter unshare ip openssl; do
    command -v "$b" >/dev/null || why+=("no $b (hack/install-deps.sh node)")
  done
  grep -qw overlay /proc/filesystems || why+=("no overlay filesystem")
  if [[ ${#why[@]} -eq 0 ]]; then
    local cg
    cg=$(track_hierarchy)/$CG_PREFIX-check-$$
    if mkdir "$cg" 2>/dev/null; then rmdir "$cg"; else why+=("cannot make cgroups under $(track_hierarchy)"); fi
    unshare --net sh -c 'ip link add name ck0 type veth peer name ck1' 2>/dev/null || why+=("cannot make network namespaces and veth pairs")
    unshare --mount --propagation private sh -c 'mount -t tmpfs none /mnt' 2>/dev/null || why+=("cannot mount in a mount namespace")
  fi
  if [[ ${#why[@]} -gt 0 ]]; then
    echo "this machine cannot run local nodes: $(IFS=';'; echo "${why[*]}" | sed 's/;/; /g')"
    return 1
  fi
}

case ${1:-up} in
up) cluster_up ;;
check) check ;;
down) cluster_down ;;
status) status ;;
stop-kubelet | start-kubelet)
  [[ ${2:-} =~ ^[1-9]$ && -f $NODES_DIR/node$2-holder.pid ]] || die "usage: $0 $1 I (a node of the cluster in $STATE)"
  if [[ $1 == stop-kubelet ]]; then stop_pid "$NODES_DIR/node$2-kubelet.pid" 10; else start_kubelet "$2"; fi
  ;;
restart-apiserver | stop-apiserver | start-apiserver)
  [[ -f $NODES_DIR/cp-holder.pid ]] || die "no nodes in $STATE: run cluster-up NODES=N"
  (in_cgroup "$CG_PREFIX-cp" nsenter --net="/proc/$(<"$NODES_DIR/cp-holder.pid")/ns/net" "$ROOT/hack/local-up-cluster.sh" "$1")
  ;;
*) die "usage: $0 [up|down|status|check|stop-kubelet I|start-kubelet I|restart-apiserver|stop-apiserver|start-apiserver]" ;;
esac
