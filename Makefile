# poligon — see README.md. The quick start on a fresh Debian 12 machine:
#   make demo    installs what the local backend needs, builds the tiny template, runs a session
#   make test    the test suite (real QEMU under TCG, qemu-ga, tesseract)

GO    ?= go
BIN   := bin/poligon
DATA  ?= $(or $(POLIGON_DATA),$(or $(XDG_DATA_HOME),$(HOME)/.local/share)/poligon)

.PHONY: all build deps tiny-template debian-template demo serve test bench lint fuzz clean conformance

# What the binary says it is (poligon version, /healthz, the startup log):
# builds here run with -buildvcs=false, so the Makefile tells it.
VERSION    ?= $(shell git describe --tags --exact-match 2>/dev/null || echo dev)
COMMIT     ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
TREE_STATE ?= $(shell git rev-parse HEAD >/dev/null 2>&1 && test -z "$$(git status --porcelain 2>/dev/null)" && echo clean || echo modified)
LDFLAGS     = -X github.com/poligon/poligon/engine.Version=$(VERSION) -X github.com/poligon/poligon/engine.Commit=$(COMMIT) -X github.com/poligon/poligon/engine.TreeState=$(TREE_STATE)

# The container image (Containerfile). The base comes from Debian packages
# (tools/image/base.sh, debootstrap) unless BASE names another, e.g.
# BASE=docker.io/library/debian:bookworm-slim where a registry is reachable.
PODMAN ?= podman
IMAGE  ?= localhost/poligon:latest
BASE   ?= localhost/poligon-base:bookworm
IMAGE_BUILD_FLAGS ?=
# Behind a TLS-inspecting proxy the build's downloads trust SSL_CERT_FILE's CAs.
BUILD_CA = $(if $(SSL_CERT_FILE),-v $(abspath $(SSL_CERT_FILE)):/run/build-ca.pem:ro --build-arg SSL_CERT_FILE=/run/build-ca.pem)

.PHONY: image image-test licenses

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/poligon

deps:
	./tools/deps.sh

tiny-template: deps
	images/tiny/build.sh "$(DATA)"

debian-template:
	images/debian/build.sh "$(DATA)"

demo: deps tiny-template build
	$(GO) run ./tools/demo --poligon $(BIN) --evidence evidence

serve: tiny-template build
	$(BIN) serve

test:
	$(GO) test -race -timeout 60m ./...

bench:
	$(GO) run ./tools/bench

# The official MCP conformance suite against poligon serve (npm installs it
# and Node 22 into the user cache on first use).
conformance:
	POLIGON_CONFORMANCE=1 $(GO) test -count=1 -v -run TestConformance ./tools/conformance

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt wants to format:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

fuzz:
	$(GO) test ./backends/rfb -run '^$$' -fuzz FuzzDecoder -fuzztime 60s

# The license of every module the binary links, against tools/licenses/allowed.txt.
licenses: build
	$(GO) run ./tools/licenses -allowed tools/licenses/allowed.txt $(BIN)

# --format docker keeps the HEALTHCHECK (OCI images carry none).
image:
	@case "$(BASE)" in localhost/poligon-base:*) PODMAN="$(PODMAN)" tools/image/base.sh "$(BASE)";; esac
	$(PODMAN) build --format docker $(IMAGE_BUILD_FLAGS) $(BUILD_CA) -t $(IMAGE) --build-arg BASE=$(BASE) \
	  --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg TREE_STATE=$(TREE_STATE) .

# Builds the image and runs it here (minutes; not part of make test).
image-test:
	POLIGON_IMAGE_TEST=1 $(GO) test -v -count=1 -timeout 60m -run TestImage ./tools/image

clean:
	rm -rf bin
