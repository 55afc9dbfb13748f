#!/usr/bin/env bash
# Fails when a file in git's index is over 1 MiB: binaries and data dumps belong in _output, not in
# the repository (build outputs are ignored in .gitignore).
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
limit=$((1024 * 1024))
big=$(git -C "${ROOT}" ls-files --stage |
  sed -E 's/^[0-7]+ ([0-9a-f]+) [0-9]+\t/\1 /' |
  git -C "${ROOT}" cat-file --batch-check='%(objectsize) %(rest)' |
  awk -v limit="${limit}" '$1 > limit')
if [[ -n "${big}" ]]; then
  echo "Tracked files over 1 MiB (size in bytes, path); remove them with git rm --cached:" >&2
  echo "${big}" >&2
  exit 1
fi
echo "no tracked file is over 1 MiB"
