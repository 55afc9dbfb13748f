#!/usr/bin/env bash
# Fails when any go.mod or go.sum in the repository would change under `go mod tidy`.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# Every module of the repository: the server, the tools and any module nested under hack/.
mapfile -t dirs < <(cd "${ROOT}" && find . -name go.mod -not -path './_output/*' -printf '%h\n' | sort)
for rel in "${dirs[@]}"; do
  dir="${ROOT}/${rel#./}"
  if ! (cd "${dir}" && go mod tidy -diff >/dev/null); then
    echo "go.mod/go.sum in ${dir} are not tidy; run: (cd ${dir} && go mod tidy)" >&2
    (cd "${dir}" && go mod tidy -diff) >&2 || true
    exit 1
  fi
done
echo "go.mod files are tidy"
