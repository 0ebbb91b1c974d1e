# Istota for Nextcloud. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
GOTAGS := sqlite_fts5
# Every go command needs the tag (FTS5); exported so plain `go test` from make works too.
export GOFLAGS := -tags=$(GOTAGS)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/istota/istota/sidecar/internal/app.Version=$(VERSION)
BIN := bin/istota
CONFIG ?=
# The Claude Code CLI from npm (nextcloud-app/package.json), used by `make run` and the tests.
export ISTOTA_CLAUDE_BIN ?= $(CURDIR)/nextcloud-app/node_modules/@anthropic-ai/claude-code/bin/claude.exe

.PHONY: help deps build run test test-go test-php check lint bench fmt clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

deps: ## install Debian packages, npm tooling and Go modules (idempotent)
	@scripts/deps.sh

build: ## build the sidecar into bin/istota
	$(GO) build -tags $(GOTAGS) -ldflags '$(LDFLAGS)' -o $(BIN) ./sidecar/cmd/istota

run: deps build ## run the sidecar with the embedded SQLite database in ./var
	ISTOTA_CLAUDE_PATH=$${ISTOTA_CLAUDE_PATH:-$(ISTOTA_CLAUDE_BIN)} ./$(BIN) serve $(if $(CONFIG),-c $(CONFIG))

test: deps test-go test-php ## run every test (Go with real SQLite, bwrap and the claude CLI; PHP)

test-go:
	$(GO) vet -tags $(GOTAGS) ./sidecar/...
	$(GO) test -tags $(GOTAGS) -race -count=1 -timeout 30m ./sidecar/...

test-php:
	@for f in $$(git ls-files -co --exclude-standard '*.php' | grep -v '^nextcloud-app/vendor/'); do php -l -n "$$f" >/dev/null || exit 1; done
	phpunit -c nextcloud-app/phpunit.xml

lint: ## gofmt, go vet and php -l
	@test -z "$$(gofmt -l sidecar)" || { gofmt -l sidecar; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet -tags $(GOTAGS) ./sidecar/...

check: lint test ## lint and test

bench: deps ## report throughput and latency figures (Go benchmarks) into bench.txt
	{ $(GO) test -tags $(GOTAGS) -run '^$$' -bench Intake -benchtime 3000x -count 1 ./sidecar/internal/httpapi && \
	  $(GO) test -tags $(GOTAGS) -run '^$$' -bench TalkRoundTrip -benchtime 10x -count 1 -timeout 20m ./sidecar/e2e && \
	  $(GO) test -tags $(GOTAGS) -run '^$$' -bench . -count 1 -timeout 20m ./sidecar/internal/sandbox && \
	  $(GO) test -tags $(GOTAGS) -run '^$$' -bench . -count 1 -timeout 20m ./sidecar/internal/memory; } | tee bench.txt

fmt: ## format Go code
	gofmt -w sidecar

clean: ## remove build output
	rm -rf bin bench.txt
