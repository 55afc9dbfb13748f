#!/usr/bin/env bash
# Pins this tools module to one Kubernetes release, e.g. `hack/tools/pin-kubernetes.sh v1.37.2`.
#
# k8s.io/kubernetes is not meant to be a dependency: its go.mod requires each of its staging
# modules (k8s.io/api, k8s.io/client-go, ...) at the placeholder v0.0.0 and points them at its own
# staging/ folders with replace directives, which only count in its own repository. A module that
# requires k8s.io/kubernetes therefore has to replace every one of those modules itself, with the
# published version that belongs to the release (v1.X.Y -> v0.X.Y). This script reads the list
# from the release's go.mod, so that it stays complete when a release adds or drops a module,
# then moves every staging module (kubectl, code-generator, ...) to the same release and tidies.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

kube=${1:?usage: $0 v1.X.Y}
[[ ${kube} =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "not a Kubernetes release: ${kube}" >&2; exit 2; }
staging=v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}

modfile=$(go mod download -json "k8s.io/kubernetes@${kube}" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[ -f "${modfile}" ] || { echo "could not download k8s.io/kubernetes@${kube}" >&2; exit 1; }
# The staging modules are the requirements at v0.0.0.
mapfile -t mods < <(go mod edit -json "${modfile}" |
  sed -n 's/^\t\t\t"Path": "\(.*\)",$/\1/; T; N; s/\n\t\t\t"Version": "v0\.0\.0"$//p')
[ "${#mods[@]}" -gt 0 ] || { echo "no staging modules found in ${modfile}" >&2; exit 1; }

# Rewrite the replace block from scratch, so that it mirrors the release exactly (dropping the
# modules an older release had), and keep it one block rather than go mod edit's single lines.
mapfile -t olds < <(sed -n -E 's/^(replace )?\t?(k8s\.io\/[^ ]+) => k8s\.io\/[^ ]+ v0\.[0-9]+\.[0-9]+$/\2/p' go.mod)
for old in "${olds[@]}"; do go mod edit -dropreplace "${old}"; done
sed -i '/written by pin-kubernetes.sh\.$/d' go.mod
{
  echo
  echo "// k8s.io/kubernetes ${kube} requires these staging modules at v0.0.0: written by pin-kubernetes.sh."
  echo "replace ("
  for m in "${mods[@]}"; do printf '\t%s => %s %s\n' "${m}" "${m}" "${staging}"; done
  echo ")"
} >>go.mod
go mod edit -fmt
echo "replaced ${#mods[@]} staging modules with ${staging}"

# Require the staging modules at their real version rather than the placeholder; tidy then drops
# the ones that no package of this module imports.
go get "k8s.io/kubernetes@${kube}" "${mods[@]/%/@${staging}}"
go mod tidy
