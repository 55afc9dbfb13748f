#!/usr/bin/env bash
# Fails when go.mod or go.sum (of the server or of hack/tools) would change under `go mod tidy`.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
for dir in "${ROOT}" "${ROOT}/hack/tools"; do
  if ! (cd "${dir}" && go mod tidy -diff >/dev/null); then
    echo "go.mod/go.sum in ${dir} are not tidy; run: (cd ${dir} && go mod tidy)" >&2
    (cd "${dir}" && go mod tidy -diff) >&2 || true
    exit 1
  fi
done
echo "go.mod files are tidy"
