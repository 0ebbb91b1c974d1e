# Istota for Nextcloud. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
GOTAGS := sqlite_fts5
# Every go command needs the tag (FTS5); exported so plain `go test` from make works too.
export GOFLAGS := -tags=$(GOTAGS)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/istota/istota/sidecar/internal/app.Version=$(VERSION)
BIN := bin/istota
BIN_INIT := bin/istota-init
CONFIG ?=
# The Claude Code CLI from npm (nextcloud-app/package.json), used by `make run` and the tests.
export ISTOTA_CLAUDE_BIN ?= $(CURDIR)/nextcloud-app/node_modules/@anthropic-ai/claude-code/bin/claude.exe

.PHONY: help deps build run test test-go test-php check lint bench fmt clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

deps: ## install Debian packages, npm tooling and Go modules (idempotent)
	@scripts/deps.sh

build: ## build the sidecar into bin/istota and its sandbox init into bin/istota-init (with the npm claude CLI linked beside them)
	$(GO) build -tags $(GOTAGS) -ldflags '$(LDFLAGS)' -o $(BIN) ./sidecar/cmd/istota
	@# The sandbox's pid 1 (C), started once per task; istota finds it beside itself. Built
	@# as it ships (static, stripped) since its start time is the point of it.
	sidecar/cmd/istota-init/build.sh cc $(BIN_INIT)
	@# istota finds the default brain.claude_path ("claude") beside itself, so serve,
	@# task and doctor run from bin/ all use the CLI `make deps` installed.
	@if [ -x '$(ISTOTA_CLAUDE_BIN)' ]; then ln -sfn '$(ISTOTA_CLAUDE_BIN)' bin/claude; fi

run: deps build ## run the sidecar with the embedded SQLite database in ./var
	./$(BIN) serve $(if $(CONFIG),-c $(CONFIG))

test: deps test-go test-php test-js test-browser test-appstore test-nextcloud ## run every test (Go with real SQLite, bwrap and the claude CLI; PHP; front end; packaging; a real Nextcloud)

test-go:
	$(GO) vet -tags $(GOTAGS) ./sidecar/...
	$(GO) test -tags $(GOTAGS) -race -count=1 -timeout 30m ./sidecar/...

test-php:
	@for f in $$(git ls-files -co --exclude-standard '*.php' | grep -v '^nextcloud-app/vendor/'); do php -l -n "$$f" >/dev/null || exit 1; done
	phpunit -c nextcloud-app/phpunit.xml

lint: deps ## gofmt, go vet and php -l
	@test -z "$$(gofmt -l sidecar)" || { gofmt -l sidecar; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet -tags $(GOTAGS) ./sidecar/...

check: lint test ## lint and test

bench: deps appstore ## every figure the issues name, with goals, in one table at the end (bench.txt)
	ISTOTA_BENCH_OUT=$(CURDIR)/build/bench-nextcloud.txt scripts/bench.sh

fmt: ## format Go code
	gofmt -w sidecar

# Front end: the settings pages (Vue 3, @nextcloud/vue) built into js/, their unit tests
# (vitest) and browser tests (playwright-core + Debian's Chromium against a real sidecar;
# screenshots in build/screenshots/).
.PHONY: js test-js test-browser
js: deps ## build the settings pages into js/ (committed, so the app works from git)
	cd nextcloud-app && npm run --silent build

test-js: deps ## vitest: the pages' stores, API wrappers, live progress and signing
	cd nextcloud-app && npm test

test-browser: deps build js ## the built pages in headless Chromium against a running sidecar
	cd nextcloud-app && npm run --silent test:browser

# The app and the sidecar against a real Nextcloud 31 + Talk 21 (../shared/nextcloud, or
# NEXTCLOUD_BUNDLE): install from the tarball, setup, Talk, files, calendars, the settings
# API and pages. Says so and skips when there is no Nextcloud bundle.
.PHONY: test-nextcloud
test-nextcloud: appstore ## the app and the sidecar against a real Nextcloud + Talk
	scripts/test-nextcloud.sh

# Release packaging: the app-store tarball with static sidecar binaries for amd64 and arm64.
.PHONY: appstore test-appstore
appstore: deps js ## build build/appstore/istota-<version>.tar.gz (sign: SIGN_KEY=app.key SIGN_CERT=app.crt)
	scripts/appstore.sh $(if $(SIGN_KEY),--sign-key '$(SIGN_KEY)') $(if $(SIGN_CERT),--sign-cert '$(SIGN_CERT)')

test-appstore: js ## build the tarball; check its allowlist, binaries, schema, signing and deploy/
	scripts/test-appstore.sh

clean: ## remove build output
	rm -rf bin bench.txt build/appstore
