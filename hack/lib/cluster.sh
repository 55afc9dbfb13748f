# shellcheck shell=bash
# What hack/local-up-cluster.sh and hack/local-up-nodes.sh share: the state dir, the loopback
# ports (each overridable; local-up-cluster.sh's header lists them) and the admin's kubectl.
STATE=${LOCAL_CLUSTER_DIR:-$ROOT/_output/local-cluster}
ETCD_PORT=${ETCD_PORT:-32379}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-32380}
APISERVER_PORT=${APISERVER_PORT:-16443}
NETWORK_APISERVER_PORT=${NETWORK_APISERVER_PORT:-8443}

# admin_kubectl ARGS...: the pinned kubectl with the cluster's admin kubeconfig.
admin_kubectl() { "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }
