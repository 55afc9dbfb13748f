#!/usr/bin/env bash
# Regenerates every generated file: deepcopy, protobuf, defaulters, conversions, API lifecycle
# (v1beta1's deprecation), OpenAPI, and the typed clientset, listers, informers and
# apply-configurations. The only way generated code changes.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
MODULE=github.com/samplecrd/network-apiserver
APIS=(pkg/apis/samplecrd pkg/apis/samplecrd/v1 pkg/apis/samplecrd/v1beta1)
VERSIONED=(pkg/apis/samplecrd/v1 pkg/apis/samplecrd/v1beta1)
CLIENT_VERSIONS=(samplecrd/v1)
HEADER="${ROOT}/hack/boilerplate.go.txt"
BIN="${TOOLS_BIN:-${ROOT}/_output/bin}"

cd "${ROOT}"
"${ROOT}/hack/install-deps.sh" protoc
"${ROOT}/hack/build-codegen-tools.sh" "${BIN}"
export PATH="${BIN}:${PATH}"

pkgs() { local p; for p in "$@"; do printf '%s/%s\n' "${MODULE}" "${p}"; done; }

echo "deepcopy"
find pkg/apis -name 'zz_generated.*.go' -delete
deepcopy-gen --go-header-file "${HEADER}" --output-file zz_generated.deepcopy.go $(pkgs "${APIS[@]}")

echo "protobuf"
# protoc resolves imports by import path, so it gets a GOPATH-shaped tree of links. apimachinery's
# packages are passed with a leading '-': look them up, never regenerate them in the module cache.
gopath=$(mktemp -d)
trap 'rm -rf "${gopath}"' EXIT
mkdir -p "${gopath}/src/github.com/samplecrd" "${gopath}/src/k8s.io" "${gopath}/src/github.com/gogo"
ln -s "${ROOT}" "${gopath}/src/${MODULE}"
ln -s "$(go list -m -f '{{.Dir}}' k8s.io/apimachinery)" "${gopath}/src/k8s.io/apimachinery"
ln -s "$(cd hack/tools && go list -m -f '{{.Dir}}' github.com/gogo/protobuf)" "${gopath}/src/github.com/gogo/protobuf"
for p in "${VERSIONED[@]}"; do rm -f "${p}/generated.proto" "${p}/generated.pb.go"; done
go-to-protobuf \
  --go-header-file "${HEADER}" \
  --output-dir "${gopath}/src" \
  --proto-import "${gopath}/src" \
  --proto-import "${gopath}/src/github.com/gogo/protobuf/protobuf" \
  --apimachinery-packages "-k8s.io/apimachinery/pkg/util/intstr,-k8s.io/apimachinery/pkg/api/resource,-k8s.io/apimachinery/pkg/runtime/schema,-k8s.io/apimachinery/pkg/runtime,-k8s.io/apimachinery/pkg/apis/meta/v1" \
  --packages "$(pkgs "${VERSIONED[@]}" | paste -sd, -)"

echo "defaulters and conversions"
defaulter-gen --go-header-file "${HEADER}" --output-file zz_generated.defaults.go $(pkgs "${VERSIONED[@]}")
conversion-gen --go-header-file "${HEADER}" --output-file zz_generated.conversion.go $(pkgs "${VERSIONED[@]}")

echo "API lifecycle"
# v1beta1's Network says when it was deprecated and what replaces it; the generic apiserver then
# sends clients the Kubernetes deprecation Warning header.
prerelease-lifecycle-gen --go-header-file "${HEADER}" --output-file zz_generated.prerelease-lifecycle.go \
  $(pkgs pkg/apis/samplecrd/v1beta1)

echo "openapi"
rm -rf pkg/generated
openapi-gen --go-header-file "${HEADER}" \
  --output-file zz_generated.openapi.go \
  --output-dir pkg/generated/openapi --output-pkg "${MODULE}/pkg/generated/openapi" \
  --output-model-name-file zz_generated.model_name.go \
  --report-filename /dev/null \
  --readonly-pkg k8s.io/apimachinery/pkg/apis/meta/v1 --readonly-pkg k8s.io/apimachinery/pkg/runtime \
  --readonly-pkg k8s.io/apimachinery/pkg/version --readonly-pkg k8s.io/apimachinery/pkg/api/resource \
  --readonly-pkg k8s.io/apimachinery/pkg/util/intstr \
  k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime k8s.io/apimachinery/pkg/version \
  k8s.io/apimachinery/pkg/api/resource k8s.io/apimachinery/pkg/util/intstr \
  $(pkgs "${VERSIONED[@]}")

echo "clients"
schema=$(mktemp)
trap 'rm -rf "${gopath}" "${schema}"' EXIT
go run ./hack/openapi-schema > "${schema}"
applyconfiguration-gen --go-header-file "${HEADER}" \
  --output-dir pkg/generated/applyconfiguration --output-pkg "${MODULE}/pkg/generated/applyconfiguration" \
  --openapi-schema "${schema}" $(pkgs pkg/apis/samplecrd/v1)
client-gen --go-header-file "${HEADER}" \
  --output-dir pkg/generated/clientset --output-pkg "${MODULE}/pkg/generated/clientset" \
  --clientset-name versioned --apply-configuration-package "${MODULE}/pkg/generated/applyconfiguration" \
  --prefers-protobuf=true \
  --input-base "${MODULE}/pkg/apis" $(for v in "${CLIENT_VERSIONS[@]}"; do printf -- '--input %s ' "$v"; done)
lister-gen --go-header-file "${HEADER}" \
  --output-dir pkg/generated/listers --output-pkg "${MODULE}/pkg/generated/listers" $(pkgs pkg/apis/samplecrd/v1)
informer-gen --go-header-file "${HEADER}" \
  --output-dir pkg/generated/informers --output-pkg "${MODULE}/pkg/generated/informers" \
  --versioned-clientset-package "${MODULE}/pkg/generated/clientset/versioned" \
  --listers-package "${MODULE}/pkg/generated/listers" $(pkgs pkg/apis/samplecrd/v1)

gofmt -s -w pkg/apis pkg/generated
echo "codegen done"
