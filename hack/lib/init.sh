# shellcheck shell=bash
# shellcheck source-path=SCRIPTDIR
# Sourced first by the hack scripts that run servers: ROOT (the repository), BIN (the built and
# pinned binaries) and the helpers under hack/lib, the way Kubernetes' hack/lib/init.sh is.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
BIN=${BIN:-$ROOT/_output/bin}
# shellcheck source=logging.sh
source "$ROOT/hack/lib/logging.sh"
# shellcheck source=process.sh
source "$ROOT/hack/lib/process.sh"
# shellcheck source=ports.sh
source "$ROOT/hack/lib/ports.sh"
# shellcheck source=kubeconfig.sh
source "$ROOT/hack/lib/kubeconfig.sh"
# shellcheck source=pki.sh
source "$ROOT/hack/lib/pki.sh"
