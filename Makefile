# network-apiserver. `make run` and `make test` set up everything they need on a fresh machine.
SHELL := /usr/bin/env bash -o errexit -o nounset -o pipefail
GO ?= go
BIN := $(CURDIR)/_output/bin
DATA_DIR ?= $(CURDIR)/.data
PORT ?= 8443
# make run confines the controller to the network namespace DEMO_NETNS, made for the run and
# deleted after it, with its CNI configuration lists in $(DATA_DIR)/cni/net.d (hack/run.sh).
# CONTROLLER_FLAGS are added last, e.g. CONTROLLER_FLAGS=--controllers=false (the API alone).
CONTROLLER_FLAGS ?=
DEMO_NETNS ?= network-apiserver-demo
# UNSAFE_HOST_NETWORK=1: the controller acts on this machine's own network and /etc/cni/net.d.
UNSAFE_HOST_NETWORK ?=
# make test-robustness[-short]: ROBUSTNESS_SEED=N replays a run (empty: a new seed, printed)
ROBUSTNESS_SEED ?=
LOCAL_CLUSTER_DIR ?= $(CURDIR)/_output/local-cluster
# make cluster-up NODES=2: the local cluster with that many real nodes (hack/local-up-nodes.sh)
NODES ?= 0
# make cluster-up: etcd members and network-apiserver replicas (e.g. REPLICAS=2 ETCD_MEMBERS=3)
REPLICAS ?= 1
ETCD_MEMBERS ?= 1
# make bench: extra flags (go run ./test/bench -h lists them); PROFILE=1 adds CPU and heap profiles
BENCH_FLAGS ?=
PROFILE ?=
# make bench-scale: Networks stored in the standalone server (SCALE) and in the CRD (SCALE_CRD);
# a side stops adding when the RSS of its processes passes SCALE_MEMORY_BUDGET_GIB
SCALE ?= 1000000
SCALE_CRD ?= $(SCALE)
SCALE_MEMORY_BUDGET_GIB ?= 12
GO_TEST_FLAGS ?= -count=1 -timeout 30m
# /version reports the k8s.io/apiserver level the server is built on (it also sets the server's
# emulation version, so it must be a Kubernetes version) and this repository's commit.
KUBE_VERSION := v1.37.2
# What a cluster with real nodes needs besides the default tools.
NODE_TOOLS := kubectl kube-apiserver kube-controller-manager etcd etcdctl kubelet kube-proxy kube-scheduler coredns cni
GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
GIT_TREE := $(shell test -z "$$(git status --porcelain 2>/dev/null)" && echo clean || echo dirty)
VERSION_PKG := k8s.io/component-base/version
# The build date is the commit's time, so that the same tree builds the same binary (and image).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BUILD_DATE := $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS := -X $(VERSION_PKG).gitVersion=$(KUBE_VERSION) -X $(VERSION_PKG).gitMajor=1 -X $(VERSION_PKG).gitMinor=37 \
  -X $(VERSION_PKG).gitCommit=$(GIT_COMMIT) -X $(VERSION_PKG).gitTreeState=$(GIT_TREE) \
  -X $(VERSION_PKG).buildDate=$(BUILD_DATE)
# make image: where the OCI layout and docker archive go, and the reference they carry.
IMAGE_DIR ?= $(CURDIR)/_output/image
IMAGE ?= network-apiserver:$(KUBE_VERSION)

.PHONY: all build image test-image run test test-unit test-integration test-e2e test-e2e-node test-bench-quick test-robustness-short test-robustness bench bench-scale verify codegen tools clean cluster-up cluster-down

all: build

## build: the server binary, into _output/bin, and the samplecrd-bridge CNI plugin (first in every
## list the controller writes: it makes a Network's bridge in the first pod's ADD) into
## _output/bin/cni, beside the reference plugins hack/build-tools.sh cni puts there
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/network-apiserver ./cmd/network-apiserver
	$(GO) build -o $(BIN)/cni/samplecrd-bridge ./cmd/samplecrd-bridge

## image: the container image, built without a container daemon (hack/image): a static binary and
## the static samplecrd-bridge CNI plugin (which the agent's init container installs), no base
## image, user 65532, every timestamp SOURCE_DATE_EPOCH, so the same commit gives the same digest.
## Writes $(IMAGE_DIR)/oci (OCI layout), $(IMAGE_DIR)/network-apiserver.tar (docker archive) and
## $(IMAGE_DIR)/digest; the image is named $(IMAGE).
image:
	mkdir -p $(IMAGE_DIR)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS) -s -w" -o $(IMAGE_DIR)/network-apiserver ./cmd/network-apiserver
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(IMAGE_DIR)/samplecrd-bridge ./cmd/samplecrd-bridge
	cd hack/image && $(GO) run . -binary $(IMAGE_DIR)/network-apiserver -cni-plugin $(IMAGE_DIR)/samplecrd-bridge -oci $(IMAGE_DIR)/oci \
	  -tar $(IMAGE_DIR)/network-apiserver.tar -tag $(IMAGE) -created $(SOURCE_DATE_EPOCH) -arch $$($(GO) env GOARCH) \
	  -revision $(GIT_COMMIT) -version $(KUBE_VERSION) >$(IMAGE_DIR)/digest
	@echo "image $(IMAGE) $$(cat $(IMAGE_DIR)/digest) in $(IMAGE_DIR)"

## tools: kubectl, kube-apiserver, kube-controller-manager and etcd at pinned versions (first time: minutes)
tools:
	hack/build-tools.sh

## run: the server with embedded etcd on 127.0.0.1:$(PORT), data in $(DATA_DIR), its controller in
## the network namespace $(DEMO_NETNS) (root; without root the API alone); prints the kubectl line
run: build
	hack/build-tools.sh kubectl
	@echo "kubectl v1.37.2 is at $(BIN)/kubectl (export PATH=$(BIN):\$$PATH)"
	@BIN='$(BIN)' DATA_DIR='$(DATA_DIR)' PORT='$(PORT)' CONTROLLER_FLAGS='$(CONTROLLER_FLAGS)' \
	  DEMO_NETNS='$(DEMO_NETNS)' UNSAFE_HOST_NETWORK='$(UNSAFE_HOST_NETWORK)' exec hack/run.sh

## cluster-up: etcd (TLS), kube-apiserver and network-apiserver behind its aggregation layer, on loopback,
## state in $(LOCAL_CLUSTER_DIR) (hack/local-up-cluster.sh lists the ports)
## NODES=N (root): plus N real nodes, each a kubelet, containerd and kube-proxy in network, mount
## and cgroup namespaces of its own, and kube-scheduler; nothing on the host's network changes
## (the first run builds kubelet, kube-proxy, kube-scheduler and CoreDNS; hack/local-up-nodes.sh)
## REPLICAS=2 ETCD_MEMBERS=3 (without NODES): two network-apiserver replicas sharing a 3-member etcd
cluster-up: build
ifeq ($(NODES),0)
	hack/build-tools.sh
	LOCAL_CLUSTER_DIR=$(LOCAL_CLUSTER_DIR) REPLICAS=$(REPLICAS) ETCD_MEMBERS=$(ETCD_MEMBERS) hack/local-up-cluster.sh up
else
	hack/install-deps.sh node
	hack/build-tools.sh $(NODE_TOOLS)
	LOCAL_CLUSTER_DIR=$(LOCAL_CLUSTER_DIR) NODES=$(NODES) hack/local-up-nodes.sh up
endif

## cluster-down: stop what cluster-up started (nodes too) and remove its state dir
cluster-down:
	LOCAL_CLUSTER_DIR=$(LOCAL_CLUSTER_DIR) hack/local-up-nodes.sh down

## test: verify, then unit, integration and end-to-end tests (root: the network tests make namespaces)
test: verify test-unit test-image test-integration test-e2e test-e2e-node test-bench-quick test-robustness-short

test-unit:
	hack/install-deps.sh netns
	$(GO) test $(GO_TEST_FLAGS) ./pkg/... ./cmd/... ./hack/openapi-schema/... ./test/localcluster/...

## test-image: make image twice (same digest), then read the image and run its binary (hack/image)
test-image:
	cd hack/image && $(GO) test $(GO_TEST_FLAGS) .

test-integration:
	hack/install-deps.sh netns
	$(GO) test $(GO_TEST_FLAGS) ./test/integration/...

## test-e2e: the built binary driven by the pinned kubectl, standalone and behind a real
## kube-apiserver (the first run builds kubectl, kube-apiserver, kube-controller-manager and etcd:
## long on a 2-core machine; later runs reuse them). etcdctl too: the local cluster uses it.
test-e2e: build
	hack/build-tools.sh
	hack/install-deps.sh netns iptables
	$(GO) test $(GO_TEST_FLAGS) ./test/e2e/...

## test-e2e-node (root): make cluster-up NODES=2 and what runs on it (test/e2e/node_test.go), then
## network-apiserver deployed onto such nodes as docs/operations.md's "On a real cluster" says, and what
## operators do to it (test/e2e/deploy_nodes_test.go). It installs containerd, runc, iptables and
## conntrack from Debian and builds kubelet, kube-proxy, kube-scheduler and CoreDNS (minutes the
## first time); on a machine that cannot run nodes it says why and skips.
test-e2e-node: build image
	@if ! why=$$(hack/local-up-nodes.sh check 2>&1) && ! { [ "$$(id -u)" = 0 ] && hack/install-deps.sh node && why=$$(hack/local-up-nodes.sh check 2>&1); }; then \
	  echo "test-e2e-node: SKIPPED: $$why"; exit 0; fi; \
	hack/build-tools.sh $(NODE_TOOLS) && \
	E2E_NODE=1 $(GO) test $(GO_TEST_FLAGS) -v -run 'TestLocalNodes|TestDeployOnNodes' ./test/e2e/

## test-bench-quick: the bench's own tests, then its -quick mode once (a minute or two). It fails
## only when the run does not complete, a request fails, a figure is missing or a watch event is
## lost; speeds are never asserted.
test-bench-quick: build
	hack/build-tools.sh
	$(GO) test $(GO_TEST_FLAGS) ./test/bench/...
	$(GO) run ./test/bench -quick -out $(CURDIR)/_output/bench/quick

## test-robustness-short: the robustness suite's self-checks, then a short run of each scenario
## (2 replicas on a 3-member etcd with TLS; the embedded-etcd server): seeded traffic, faults, and
## validation from etcd's full history (docs/robustness.md). ROBUSTNESS_SEED=N replays a seed
## (default: a new one, printed); a failing run keeps its files under _output/robustness.
test-robustness-short: build
	hack/build-tools.sh etcd etcdctl
	$(GO) test $(GO_TEST_FLAGS) -v ./test/robustness/... -args $(if $(ROBUSTNESS_SEED),-seed=$(ROBUSTNESS_SEED))

## test-robustness: the full scenarios (minutes each), same checks.
test-robustness: build
	hack/build-tools.sh etcd etcdctl
	$(GO) test -count=1 -timeout 60m -v ./test/robustness/... -args -full $(if $(ROBUSTNESS_SEED),-seed=$(ROBUSTNESS_SEED))

## bench: network-apiserver against the best CRD for the same API (kube-apiserver, same etcd), on
## a local cluster it starts and stops itself; prints a table, writes _output/bench/bench-<time>.json.
## The default sizes take about 12 minutes on 2 cores. BENCH_FLAGS="-n 2000 ...", PROFILE=1.
bench: build
	hack/build-tools.sh
	$(GO) run ./test/bench $(if $(filter 1,$(PROFILE)),-profile) $(BENCH_FLAGS)

## bench-scale (not in make test; an hour or more of both cores, and most of the memory): SCALE Networks
## (default 1,000,000) in a standalone network-apiserver (embedded etcd, --controllers=false), then
## SCALE_CRD in the CRD on kube-apiserver + etcd, one side at a time; a side stops adding when its
## RSS passes SCALE_MEMORY_BUDGET_GIB (default 12) and says so. Reports creates/s of the first and
## last 10%, RSS, Go heap, etcd db size, informer cold sync, a paged LIST walk and restart to
## /readyz; writes _output/bench/bench-scale-<time>.json. A small point: make bench-scale SCALE=20000
bench-scale: build
	hack/build-tools.sh
	$(GO) run ./test/bench -scale $(SCALE) -scale-crd $(SCALE_CRD) -scale-memory-budget-gib $(SCALE_MEMORY_BUDGET_GIB) $(BENCH_FLAGS)

## verify: gofmt, go vet, go.mod tidy, fresh generated code, the license header on every Go file
## (hack/verify-boilerplate.sh -w adds it) and no tracked file over 1 MiB
verify:
	hack/verify-file-sizes.sh
	hack/verify-boilerplate.sh
	@bad=$$(gofmt -s -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './_output/*')); \
	  if [ -n "$$bad" ]; then echo "gofmt -s would change: $$bad"; exit 1; fi
	$(GO) vet ./...
	hack/verify-gomod.sh
	hack/verify-codegen.sh

## codegen: regenerate deepcopy, protobuf, conversions, defaulters, OpenAPI and clients
codegen:
	hack/update-codegen.sh

clean:
	rm -rf _output $(DATA_DIR)
