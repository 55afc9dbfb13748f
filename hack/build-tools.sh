#!/usr/bin/env bash
# Builds the pinned Kubernetes and etcd binaries from Go modules into _output/bin (or $OUT_DIR):
#   kubectl kube-apiserver kube-controller-manager   hack/tools/go.mod (k8s.io/kubernetes and
#                                                     k8s.io/kubectl; kubectl's main is
#                                                     hack/tools/cmd/kubectl)
#   cni                                               the reference CNI plugins bridge, host-local,
#                                                     portmap and loopback into OUT_DIR/cni, from
#                                                     hack/tools/cmd/cni/go.mod, a module of its own
#                                                     (the tests that attach pods as a runtime does)
#   etcd etcdctl                                      hack/tools/cmd/etcd/go.mod, a module of its own
#                                                     so that etcd's newer dependencies (grpc, otel,
#                                                     x/net, x/tools) never move the versions that
#                                                     k8s.io/kubernetes and the code generators pin
#
#   kubelet kube-proxy kube-scheduler                 hack/tools/go.mod, only when asked for: the
#                                                     real nodes of `make cluster-up NODES=N`
#   coredns                                           hack/tools/cmd/coredns/go.mod, a module of its
#                                                     own like etcd's, only when asked for: the
#                                                     nodes' cluster DNS
#
# Usage: hack/build-tools.sh [TOOL...]    (no TOOL: the first six)
#
# A tool is rebuilt only when its binary is missing or its stamp (OUT_DIR/.TOOL.stamp) was written
# for other inputs: the go.mod and go.sum that pin it, its main package, this script (which holds
# the flags) and the Go version. So a second run only hashes a few files and takes well under a
# second; a cold one compiles Kubernetes, which takes many minutes on a small machine.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
OUT_DIR=$(mkdir -p "${OUT_DIR:-${ROOT}/_output/bin}" && cd "${OUT_DIR:-${ROOT}/_output/bin}" && pwd -P)
KUBE_MOD=${ROOT}/hack/tools
ETCD_MOD=${ROOT}/hack/tools/cmd/etcd
CNI_MOD=${ROOT}/hack/tools/cmd/cni
DNS_MOD=${ROOT}/hack/tools/cmd/coredns

# What each tool is built from: the module folder, then the package to build there.
declare -A module=(
  [kubectl]=${KUBE_MOD} [kube-apiserver]=${KUBE_MOD} [kube-controller-manager]=${KUBE_MOD}
  [kubelet]=${KUBE_MOD} [kube-proxy]=${KUBE_MOD} [kube-scheduler]=${KUBE_MOD}
  [etcd]=${ETCD_MOD} [etcdctl]=${ETCD_MOD} [cni]=${CNI_MOD} [coredns]=${DNS_MOD}
)
declare -A package=(
  [kubectl]=./cmd/kubectl
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [etcd]=.
  [etcdctl]=go.etcd.io/etcd/etcdctl/v3
  [coredns]=.
  [cni]="github.com/containernetworking/plugins/plugins/main/bridge github.com/containernetworking/plugins/plugins/ipam/host-local github.com/containernetworking/plugins/plugins/meta/portmap github.com/containernetworking/plugins/plugins/main/loopback"
)
all=(kubectl kube-apiserver kube-controller-manager etcd etcdctl cni)
known=("${all[@]}" kubelet kube-proxy kube-scheduler coredns)
tools=("$@")
[ "${#tools[@]}" -gt 0 ] || tools=("${all[@]}")
for t in "${tools[@]}"; do
  [ -n "${package[${t}]-}" ] || { echo "build-tools: unknown tool ${t} (known: ${known[*]})" >&2; exit 2; }
done

goenv=$(go env GOVERSION GOOS GOARCH)
# key TOOL: a hash of everything the tool's binary is made from.
key() {
  local mod=${module[$1]} main=()
  case $1 in
    kubectl) main=("${KUBE_MOD}/cmd/kubectl"/*.go) ;;
    etcd | etcdctl) main=("${ETCD_MOD}"/*.go) ;;
    cni) main=("${CNI_MOD}"/*.go) ;;
    coredns) main=("${DNS_MOD}"/*.go) ;;
  esac
  {
    echo "$1 ${goenv}"
    sha256sum "${mod}/go.mod" "${mod}/go.sum" "${BASH_SOURCE[0]}" "${main[@]}" | cut -d' ' -f1
  } | sha256sum | cut -d' ' -f1
}

stale=()
for t in "${tools[@]}"; do
  bin=${OUT_DIR}/${t}
  [ "${t}" != cni ] || bin=${OUT_DIR}/cni/bridge
  if [ -x "${bin}" ] && [ "$(cat "${OUT_DIR}/.${t}.stamp" 2>/dev/null)" = "$(key "${t}")" ]; then
    continue
  fi
  stale+=("${t}")
done
if [ "${#stale[@]}" -eq 0 ]; then
  echo "build-tools: ${tools[*]} up to date in ${OUT_DIR}"
  exit 0
fi

# The Kubernetes binaries report their version through variables that release builds set with
# -X, in both k8s.io/component-base/version and k8s.io/client-go/pkg/version. The values come
# from the pinned module: its version, and its publication time as the build date (a fixed date
# keeps the binaries reproducible). There is no git commit to report: the source is the module zip
# whose hash go.sum pins, hence an empty gitCommit and a clean tree.
kube_ldflags() {
  local version time major minor
  read -r version time < <(go list -C "${KUBE_MOD}" -m -f '{{.Version}} {{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
  [[ ${version} =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || { echo "build-tools: odd k8s.io/kubernetes version ${version}" >&2; exit 1; }
  major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
  local kubectl
  kubectl=$(go list -C "${KUBE_MOD}" -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' k8s.io/kubectl)
  [ "${kubectl}" = "v0.${version#v1.}" ] || { echo "build-tools: k8s.io/kubectl ${kubectl} does not match k8s.io/kubernetes ${version}" >&2; exit 1; }
  local flags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
    flags+=" -X ${pkg}.gitCommit= -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${time}"
  done
  echo "${flags}"
}

# build MODULE_DIR LDFLAGS TOOL...: one go build for the tools of one module, so that the packages
# they share are compiled once and in parallel.
build() {
  local dir=$1 ldflags=$2 t pkgs=() start=${SECONDS}
  shift 2
  for t in "$@"; do
    rm -f "${OUT_DIR}/.${t}.stamp"
    pkgs+=("${package[${t}]}")
  done
  echo "build-tools: building $* into ${OUT_DIR}"
  CGO_ENABLED=0 go build -C "${dir}" -trimpath -ldflags "${ldflags}" -o "${OUT_DIR}/" "${pkgs[@]}"
  for t in "$@"; do key "${t}" >"${OUT_DIR}/.${t}.stamp"; done
  echo "build-tools: built $* in $((SECONDS - start))s"
}

kube=() etcd=() cni=() dns=()
for t in "${stale[@]}"; do
  if [ "${t}" = cni ]; then cni+=("${t}")
  elif [ "${t}" = coredns ]; then dns+=("${t}")
  elif [ "${module[${t}]}" = "${KUBE_MOD}" ]; then kube+=("${t}")
  else etcd+=("${t}"); fi
done
# The plugins go to a directory of their own (a runtime's CNI bin dir), static like the releases.
if [ "${#cni[@]}" -gt 0 ]; then
  rm -f "${OUT_DIR}/.cni.stamp"
  mkdir -p "${OUT_DIR}/cni"
  echo "build-tools: building the CNI plugins into ${OUT_DIR}/cni"
  # shellcheck disable=SC2086 # the package list is several words
  CGO_ENABLED=0 go build -C "${CNI_MOD}" -trimpath -ldflags "-s -w" -o "${OUT_DIR}/cni/" ${package[cni]}
  key cni >"${OUT_DIR}/.cni.stamp"
fi
if [ "${#kube[@]}" -gt 0 ]; then
  ldflags=$(kube_ldflags)
  build "${KUBE_MOD}" "${ldflags}" "${kube[@]}"
fi
[ "${#etcd[@]}" -eq 0 ] || build "${ETCD_MOD}" "-s -w" "${etcd[@]}"
[ "${#dns[@]}" -eq 0 ] || build "${DNS_MOD}" "-s -w" "${dns[@]}"
