#!/usr/bin/env bash
# Installs the Debian packages a make target needs, once: the only system packages we use.
#   protoc   - protobuf compiler and well-known .proto files, for hack/update-codegen.sh
#   netns    - iproute2 for the network-namespace tests
#   iptables - iptables, for the CNI bridge (ipMasq) and portmap plugins in the runtime e2e
#   node     - containerd, runc, iptables, nftables and conntrack for the local cluster's real nodes
#              (hack/local-up-nodes.sh)
set -o errexit -o nounset -o pipefail
# shellcheck source=lib/logging.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/logging.sh"
need=()
for what in "$@"; do
  case "${what}" in
    protoc) command -v protoc >/dev/null && [ -f /usr/include/google/protobuf/descriptor.proto ] || need+=(protobuf-compiler libprotobuf-dev) ;;
    netns) command -v ip >/dev/null || need+=(iproute2) ;;
    iptables) command -v iptables >/dev/null || need+=(iptables) ;;
    node)
      command -v ip >/dev/null || need+=(iproute2)
      command -v containerd >/dev/null || need+=(containerd)
      command -v runc >/dev/null || need+=(runc)
      command -v iptables >/dev/null || need+=(iptables)
      command -v nft >/dev/null || need+=(nftables)
      command -v conntrack >/dev/null || need+=(conntrack)
      command -v openssl >/dev/null || need+=(openssl)
      ;;
    *) log "unknown dependency ${what}"; exit 2 ;;
  esac
done
[ "${#need[@]}" -eq 0 ] && exit 0
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
info "installing Debian packages: ${need[*]}"
${sudo} apt-get update -qq
DEBIAN_FRONTEND=noninteractive ${sudo} apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
