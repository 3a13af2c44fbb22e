# Canon's tasks. `make help` lists them.

SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
CLI       := github.com/canon-sync/canon/cli
LDFLAGS   := -X $(CLI).version=$(VERSION) -X $(CLI).commit=$(COMMIT)
DATA      ?= .canon
HTTP      ?= 127.0.0.1:8080
KAFKA_PORT ?= 9092
GOLANGCI_LINT_VERSION := v2.15.0
TEST_TIMEOUT ?= 25m
PKGS      ?= ./...
BENCH_FLAGS ?=

.PHONY: help
help: ## List the tasks
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/canon
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/canon ./cmd/canon

.PHONY: run
run: build ## Build and start `canon dev` (DATA=.canon HTTP=127.0.0.1:8080 KAFKA_PORT=9092), with a local ClickHouse when it can
	@scripts/dev-clickhouse $(DATA)
	$(BIN)/canon dev --data $(DATA) --http $(HTTP) --kafka-port $(KAFKA_PORT)

.PHONY: todo
todo: build ## Start `canon dev` with the todo example app at /app/ (examples/todo/app; its mutators deployed to dev/todo)
	@scripts/dev-clickhouse $(DATA)
	$(BIN)/canon dev --data $(DATA) --http $(HTTP) --kafka-port $(KAFKA_PORT) \
		--app examples/todo/app --app-mutators examples/todo/mutators.ts --app-project todo

.PHONY: deps
deps: ## Install what the tests need and is missing (Java, Maven, Chromium, python3-venv; as root with apt-get)
	@scripts/provision

.PHONY: test
test: deps vet ## Provision Kafka and ClickHouse, then run every test with the race detector
	$(GO) run ./internal/testenv/run -- $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

.PHONY: test-short
test-short: ## Run the unit tests only (no Kafka, no ClickHouse)
	$(GO) test -race -short -count=1 $(PKGS)

.PHONY: bench
bench: deps build ## End-to-end load test, Canon beside raw Kafka on real servers (BENCH_FLAGS=…; results in bench-results/)
	$(GO) build -o $(BIN)/canon-bench ./cmd/canon-bench
	$(GO) run ./internal/testenv/run -- $(BIN)/canon-bench --canon $(BIN)/canon --out bench-results $(BENCH_FLAGS)

.PHONY: bench-go
bench-go: deps ## Run the Go benchmarks (go test -bench) against the real servers
	$(GO) run ./internal/testenv/run -- $(GO) test -run '^$$' -bench . -benchmem -count 5 -timeout 60m $(PKGS)

.PHONY: lint
lint: $(BIN)/golangci-lint ## Run golangci-lint (pinned, installed into bin/)
	$(BIN)/golangci-lint run ./...

$(BIN)/golangci-lint:
	GOBIN=$(abspath $(BIN)) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: fmt
fmt: ## Format the code
	gofmt -s -w .

.PHONY: vet
vet: ## go vet, and fail on unformatted files
	$(GO) vet ./...
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi

.PHONY: up
up: ## Start Kafka, ClickHouse and Canon with Docker Compose
	@mkdir -p deploy
	@test -f deploy/keys.json || $(GO) run ./cmd/canon token keygen --keys deploy/keys.json
	@test -f deploy/public-keys.json || $(GO) run ./cmd/canon token public --keys deploy/keys.json --out deploy/public-keys.json
	@$(GO) run ./internal/testenv/certs -dir deploy/certs -hosts kafka-1,kafka-2,kafka-3
	docker compose up -d --build

.PHONY: down
down: ## Stop the Docker Compose deployment (volumes are kept)
	docker compose down

.PHONY: clean
clean: ## Remove build output (not the dev data in .canon)
	rm -rf $(BIN)
