#!/usr/bin/env bash
# Builds the pinned code generators (hack/tools/go.mod) into the folder given as $1. Go's build
# cache makes a second run take about a second.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
out=$(mkdir -p "$1" && cd "$1" && pwd -P)
go build -C "${ROOT}/hack/tools" -o "${out}/" \
  golang.org/x/tools/cmd/goimports \
  k8s.io/code-generator/cmd/applyconfiguration-gen \
  k8s.io/code-generator/cmd/client-gen \
  k8s.io/code-generator/cmd/conversion-gen \
  k8s.io/code-generator/cmd/deepcopy-gen \
  k8s.io/code-generator/cmd/defaulter-gen \
  k8s.io/code-generator/cmd/go-to-protobuf \
  k8s.io/code-generator/cmd/go-to-protobuf/protoc-gen-gogo \
  k8s.io/code-generator/cmd/informer-gen \
  k8s.io/code-generator/cmd/lister-gen \
  k8s.io/code-generator/cmd/prerelease-lifecycle-gen \
  k8s.io/kube-openapi/cmd/openapi-gen
