#!/usr/bin/env bash
# Fails when generated code is stale: regenerates into a scratch copy of the tree and diffs.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
scratch=$(mktemp -d)
trap 'rm -rf "${scratch}"' EXIT
tar -C "${ROOT}" --exclude=./_output --exclude=./.git --exclude=./.data -cf - . | tar -C "${scratch}" -xf -
"${ROOT}/hack/build-codegen-tools.sh" "${ROOT}/_output/bin"
TOOLS_BIN="${ROOT}/_output/bin" "${scratch}/hack/update-codegen.sh" >/dev/null
if ! diff -ruN "${ROOT}/pkg" "${scratch}/pkg" >"${scratch}.diff"; then
  echo "Generated code is stale; run hack/update-codegen.sh. Differences:" >&2
  head -n 60 "${scratch}.diff" >&2
  rm -f "${scratch}.diff"
  exit 1
fi
rm -f "${scratch}.diff"
echo "generated code is up to date"
