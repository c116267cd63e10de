# haraqa build, test and benchmark entry points. `make test` is what CI runs.
GO       ?= go
FUZZTIME ?= 5s
PKGS     := ./...
# BIN: where build and run write the binaries.
BIN      ?= bin
# image: the container tool (podman if installed, else docker), the image's name and its second tag.
CONTAINER ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo docker)
IMAGE     ?= haraqa/haraqa
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all build run test lint fmt-check vet unit deploy-test fuzz bench-once bench bench-cluster bench-go torture image gnet-update clean

all: build

# BUILD_NOTE: what build and run say a build costs (measured from a fresh clone with an empty build
# cache and the modules already downloaded, on 2 cores: README, "On a fresh machine").
BUILD_NOTE := the first build compiles every dependency: 48 s from a fresh clone on a quiet 2-core machine, about 200 s on a loaded one; later ones take seconds

build:
	@echo "building every package, then $(BIN)/haraqa, $(BIN)/hrqa and $(BIN)/haraqa-bench ($(BUILD_NOTE))..."
	$(GO) build $(PKGS)
	$(GO) build -o $(BIN)/haraqa ./cmd/server
	$(GO) build -o $(BIN)/hrqa ./cmd/hrqa
	$(GO) build -o $(BIN)/haraqa-bench ./cmd/haraqa-bench

## run: the server on the volume VOLUME, both ports on 127.0.0.1 only: the binary protocol on
## TCP_PORT and HTTP on HTTP_PORT. Built into BIN, then exec'd, so that make's only child is the
## server itself and a signal to make reaches it (go run would leave the server behind).
## Each can be set on the command line: make run TCP_PORT=24353 HTTP_PORT=4354 VOLUME=/tmp/v
## It says what it builds, then the ports, the volume and the HARAQA_ADDR hrqa needs for them.
VOLUME    ?= ./data
TCP_PORT  ?= 14353
HTTP_PORT ?= 4353
run:
	@echo "building $(BIN)/haraqa ($(BUILD_NOTE))..."
	$(GO) build -o $(BIN)/haraqa ./cmd/server
	@echo "starting $(BIN)/haraqa on 127.0.0.1: binary protocol port $(TCP_PORT), HTTP port $(HTTP_PORT) (http://127.0.0.1:$(HTTP_PORT)/docs/), volume $(VOLUME)"
	@echo "for hrqa in another terminal: export HARAQA_ADDR=127.0.0.1:$(TCP_PORT); Ctrl-C stops the server"
	@exec $(BIN)/haraqa -listen 127.0.0.1 -tcp $(TCP_PORT) -http $(HTTP_PORT) $(VOLUME)

## test: everything CI checks: formatting, vet, race tests, the deploy module's tests (manifests, chart,
## container image), every fuzz target briefly, every benchmark once.
test: lint unit deploy-test fuzz bench-once

lint: fmt-check vet

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)
	cd deploy && $(GO) vet ./...
	# The client library and hrqa build for macOS and Windows too (the server is Linux only:
	# storage uses unix.Gettid and other Linux calls).
	GOOS=darwin $(GO) build -o /dev/null ./client/... ./protocol ./cmd/hrqa
	GOOS=windows $(GO) build -o /dev/null ./client/... ./protocol ./cmd/hrqa

# Without root a missing Debian package cannot be installed: the test that
# needs it is skipped, and the line says which; under CI (CI=true, run as
# root) that is a failure instead.
unit:
	browser=1; \
	bash .ci/chromium || { browser=0; echo "make test: skipping the browser test of the API docs (docs): chromium is not installed and cannot be without root"; [ -z "$$CI" ] || exit 1; }; \
	bash .ci/patch || { echo "make test: skipping TestGnetPatchApplied (broker): patch is not installed and cannot be without root"; [ -z "$$CI" ] || exit 1; }; \
	HARAQA_BROWSER_TEST=$$browser $(GO) test -race -count=1 $(PKGS)

## deploy-test: the deploy module (its own go.mod, so Helm and the Kubernetes API stay out of the
## main module): the manifests and the chart decoded strictly and checked against the server, and
## the image built and run (podman installed first by .ci/podman; skipped only where it cannot be).
deploy-test:
	if bash .ci/podman; then export HARAQA_IMAGE_TEST=1; else echo "podman cannot be installed here: TestImage will be skipped"; fi; \
	cd deploy && $(GO) test -count=1 ./...

## fuzz: run each fuzz target for FUZZTIME.
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) bash .ci/fuzz

## bench-once: run every benchmark once so they keep compiling and running.
bench-once:
	HARAQA_BENCH_WARMUP=0 $(GO) test -run '^$$' -bench . -benchtime=1x $(PKGS)

## bench: the haraqa-bench matrix (produce, consume, both; 100 B and 1 KiB; batches 1, 100, 1000;
## 1 and 3 volumes), each beside its same-run ceiling; rewrites its section of docs/benchmarks.md
## (between the bench-matrix markers; hand-written text goes outside them, or it refuses).
bench:
	$(GO) run ./cmd/haraqa-bench -matrix -matrix-out docs/benchmarks.md

## bench-cluster: three servers on loopback as one cluster, with -replicas 1 then 3 (-min-insync 2,
## acks=all): batched and one-at-a-time produce rates and their R=3/R=1 ratios (docs/scaling.md).
bench-cluster:
	bash bench/cluster.sh

## bench-go: the storage and broker Go benchmarks, each beside its raw baseline, as a table.
bench-go:
	$(GO) test -run '^$$' -bench . -benchtime=1s -count=3 ./storage ./broker | tee bench.out
	python3 .ci/benchtable bench.out

## torture: the server binary killed, its volumes damaged, its disk filled, its descriptors and
## connections exhausted, then (threats) every row of the second security review's threat table
## against a server with tokens, one line each (about 2 minutes, and under 3 more for threats;
## needs root for the tmpfs). Not part of `make test`. TORTURE_FLAGS shortens it, e.g.
## TORTURE_FLAGS='-cycles 3 -faults 5 -attack 5s'; TORTURE_FLAGS='-phases threats -threat-rows 1,3,D'
## runs some rows of threats only.
torture:
	$(GO) run ./bench/torture $(TORTURE_FLAGS)

## image: the server image $(IMAGE):latest and :$(VERSION), FROM scratch, with docker or podman
## (CONTAINER=docker to choose). The static binary is built here, so no base image is pulled.
image:
	rm -rf bin/image
	mkdir -p bin/image/rootfs/tmp
	chmod 1777 bin/image/rootfs/tmp
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o bin/image/rootfs/haraqa ./cmd/server
	$(CONTAINER) build -f Dockerfile -t $(IMAGE):latest -t $(IMAGE):$(VERSION) \
		--label org.opencontainers.image.version=$(VERSION) bin/image

## gnet-update: replace the gnet carried in broker/third_party/gnet by another release, its patch
## reapplied (broker/third_party/gnet/update.sh): make gnet-update GNET_VERSION=v2.9.x
## (GNET_VERSION, not VERSION: VERSION is the image's tag).
GNET_VERSION ?=
gnet-update:
	bash broker/third_party/gnet/update.sh $(GNET_VERSION)

clean:
	rm -rf bin bench.out
