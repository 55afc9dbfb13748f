#!/usr/bin/env bash
# Fails when a tracked Go file does not start with the license header of hack/boilerplate.go.txt
# (after its //go:build lines, if any). With -w it adds the header where it is missing.
# code-generator stamps the same header on what it writes, so generated files pass unchanged.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
header=${ROOT}/hack/boilerplate.go.txt
fix=false
[ "${1-}" = -w ] && fix=true
lines=$(wc -l <"${header}")
missing=()
while IFS= read -r -d '' f; do
  # The header may follow build constraints and their blank line; anything else must come after it.
  skip=$(awk '/^\/\/go:build|^\/\/ \+build/ {n=NR; next} NR==n+1 && /^$/ {n=NR; next} {exit} END {print n+0}' "${ROOT}/${f}")
  if ! sed -n "$((skip + 1)),$((skip + lines))p;$((skip + lines))q" "${ROOT}/${f}" | cmp -s - "${header}"; then
    missing+=("${f}")
  fi
done < <(git -C "${ROOT}" ls-files -z -- '*.go')
if [ "${#missing[@]}" -eq 0 ]; then
  echo "every Go file carries the license header"
  exit 0
fi
if ! ${fix}; then
  printf 'Go files without the license header of hack/boilerplate.go.txt (hack/verify-boilerplate.sh -w adds it):\n' >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi
for f in "${missing[@]}"; do
  path=${ROOT}/${f}
  skip=$(awk '/^\/\/go:build|^\/\/ \+build/ {n=NR; next} NR==n+1 && /^$/ {n=NR; next} {exit} END {print n+0}' "${path}")
  { head -n "${skip}" "${path}"; cat "${header}"; tail -n +"$((skip + 1))" "${path}"; } >"${path}.tmp"
  mv "${path}.tmp" "${path}"
  echo "added the header to ${f}"
done
