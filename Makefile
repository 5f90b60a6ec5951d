# poligon — see README.md. The quick start on a fresh Debian 12 machine:
#   make demo    installs what the local backend needs, builds the tiny template, runs a session
#   make test    the test suite (real QEMU under TCG, qemu-ga, tesseract)

GO    ?= go
BIN   := bin/poligon
DATA  ?= $(or $(POLIGON_DATA),$(or $(XDG_DATA_HOME),$(HOME)/.local/share)/poligon)

.PHONY: all build deps tiny-template demo serve test bench lint fuzz clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/poligon

deps:
	./tools/deps.sh

tiny-template: deps
	images/tiny/build.sh "$(DATA)"

demo: deps tiny-template build
	$(GO) run ./tools/demo --poligon $(BIN) --evidence evidence

serve: tiny-template build
	$(BIN) serve

test:
	$(GO) test -race -timeout 30m ./...

bench:
	$(GO) run ./tools/bench

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt wants to format:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

fuzz:
	$(GO) test ./backends/rfb -run '^$$' -fuzz FuzzDecoder -fuzztime 60s

clean:
	rm -rf bin
