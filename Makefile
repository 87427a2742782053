# The two front-door commands are `make demo` and `make test`; both do all set-up themselves.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Router processes started through make record themselves here; stack-down stops them.
export ROUTER_PID_DIR := $(CURDIR)/.stack/run/units

# Where Kafka and Redis come from (as for the tests, tests/conftest.py):
#   local     (default) the project's own stack, ops/stack.sh: Java, Maven, Debian's Redis
#   docker    the kafka and redis services of docker-compose.yml: no Java, Maven or jars
#   external  servers of your own, at ROUTER_KAFKA__BOOTSTRAP_SERVERS and ROUTER_REDIS__URL
# Only `local` fetches jars with Maven: with docker or external, the Spark tests are skipped
# unless Java and the connector jars (`make jars`) are there.
STACK := $(or $(ROUTER_STACK),local)
DOCKER_COMPOSE ?= docker compose
ifeq ($(STACK),local)
JARS := jars
STACK_UP := ops/stack.sh up
STACK_DOWN := ops/stack.sh down
STACK_STATUS := ops/stack.sh status
else ifeq ($(STACK),docker)
JARS :=
STACK_UP := $(DOCKER_COMPOSE) up -d --wait kafka redis
STACK_DOWN := $(DOCKER_COMPOSE) down
STACK_STATUS := $(DOCKER_COMPOSE) ps
else ifeq ($(STACK),external)
JARS :=
STACK_STATUS := echo "ROUTER_STACK=external: Kafka at $${ROUTER_KAFKA__BOOTSTRAP_SERVERS:?not set}, Redis at $${ROUTER_REDIS__URL:?not set}"
STACK_UP := @$(STACK_STATUS)
STACK_DOWN := @echo "ROUTER_STACK=external: nothing of ours to stop"
else
$(error ROUTER_STACK must be local, docker or external, not '$(ROUTER_STACK)')
endif

.PHONY: test-judge test-chaos jaeger jaeger-background toxiproxy toxiproxy-background dist segments-100mb test-faults test-sentinel sentinel-up sentinel-down sentinel-status test-cluster cluster-up cluster-down cluster-status test-ha stack-up-ha stack-down-ha stack-status-ha test-secure secure-up secure-down help venv jars stack-up stack-down stack-status lint fmt test test-fast demo chaos soak bench spark-demo spark-bench clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

venv: $(STAMP) ## Create .venv and install the project with its dev, spark and bench extras

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (found " + sys.version.split()[0] + "); set PYTHON=/path/to/python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,spark,bench]'
	@touch $(STAMP)

jars: venv ## Fetch the Kafka broker and tools jars and the Spark connector jars from Maven Central, and build the Schema Registry (cached in .cache/)
	ops/stack.sh fetch-jars
	ops/registry.sh fetch || echo "[registry] not built (see above): the Schema Registry tests will be skipped"

stack-up: venv ## Start the local stack: Apache Kafka (KRaft) on 127.0.0.1:9092 and Redis on :6379
	$(STACK_UP)

stack-down: ## Stop the local stack; leaves no process of ours running
	$(STACK_DOWN)

stack-status: ## Show what the local stack is running
	@$(STACK_STATUS)

lint: venv ## ruff (lint + format check), mypy --strict on router/ and ops/, and the import contracts (layers, no cycles)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy router ops
	$(BIN)/lint-imports

fmt: venv ## Apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: jaeger-background toxiproxy-background venv $(JARS) lint ## Everything from a fresh clone: venv, jars, Jaeger and Toxiproxy (built beside the rest), lint, stack, the whole suite
	$(BIN)/pytest

jaeger-background: ## Start building Jaeger in the background at low priority unless built (make test does, first: the build runs beside the set-up and the suite, and the tracing test waits for it)
	@ops/jaeger.sh background

jaeger: ## Build Jaeger (the tracing test's backend) with Go from the Go module proxy, once (cached in .cache/); never fails: without it the tracing test skips, saying why
	@ops/jaeger.sh ensure >/dev/null || echo "jaeger: not built (above); the tracing test will skip"

toxiproxy-background: ## Start building Toxiproxy (the network faults' proxy) in the background at low priority unless built (make test does, first; the network-fault tests wait for it)
	@ops/toxiproxy.sh background

toxiproxy: ## Build Toxiproxy with Go from the Go module proxy, once (cached in .cache/, 1-2 min the first time); never fails: without it the network-fault tests skip, saying why
	@ops/toxiproxy.sh ensure >/dev/null || echo "toxiproxy: not built (above); the network-fault tests will skip"

demo: venv $(JARS) stack-up ## Run the whole system end to end and check every guarantee
	$(BIN)/python -m ops.demo $(ARGS)

chaos: venv jars stack-up ## Chaos run: 100k messages (5% multicast, 5% with a lifetime, 10% with a priority over 3 bands), 20+ SIGKILLs, a broker and a Redis restart; ARGS=--private-stack adds the network faults (Toxiproxy); ARGS=--all-features adds whole groups and scattered logical order; ARGS=--ha runs on 3 brokers + Redis Sentinel of its own (2 broker SIGKILLs, a failover, a replica pause, the 6 network faults; implies --all-features)
	$(BIN)/python -m ops.chaos $(ARGS)

soak: venv jars ## Soak: 30 min at a steady load (4 x 25 msg/s) with a fault a minute, sampled every 5 s (RSS, Redis memory and keys, tables, topics, lag); fails on growth; own servers; .results/soak
	$(BIN)/python -m ops.soak $(ARGS)

bench: venv $(JARS) stack-up ## Benchmark: units and whole path vs Python and Java relays, Redis cost, 3-broker row, Redis Cluster row, tracing off vs on; .results/bench
	$(BIN)/python -m ops.bench $(ARGS)

test-secure: venv jars ## Security tests: SASL_SSL Kafka with per-role ACLs, Redis ACL + TLS (own servers, ~1 min)
	ROUTER_TEST_SECURE=1 $(BIN)/pytest tests/integration/secure tests/unit/security

test-ha: venv jars ## Replication tests: 50,000 messages through broker kills on a 3-broker cluster, and the short chaos --ha --all-features (3,000 messages, a broker kill, a Redis failover, the 6 network faults) (own servers, ~9 min)
	ROUTER_TEST_HA=1 $(BIN)/pytest tests/integration/ha

test-chaos: venv $(JARS) ## The short chaos runs of tests/integration/ops/test_chaos.py, the whole-group waiting-room run included (make test skips that one), on a private stack (~5 min)
	ROUTER_TEST_CHAOS=1 $(BIN)/pytest tests/integration/ops/test_chaos.py

test-faults: venv $(JARS) toxiproxy ## Long fault runs that make test skips for their time (issue 32; about 5 min together): unit processes frozen past their session, then resumed; a unit frozen in its rebalance callback; a private broker frozen past the transactional time-outs; the broker away for 5 s under traffic, ridden out; every network fault kind with unit kills; a send unit cut off from the broker beside a receive unit cut off from Redis
	ROUTER_TEST_FAULTS=1 $(BIN)/pytest tests/integration/faults -s

test-judge: venv $(JARS) ## Broken builds (ops/harness/breakage), each must fail the verdict with its own kind of violation: fencing off and records reordered through the short chaos; a release before the commit, leases ignored and leases unchecked through a targeted scenario each, which the router must pass (~4 min)
	ROUTER_TEST_JUDGE=1 $(BIN)/pytest tests/integration/judge -s

test-sentinel: venv $(JARS) ## Redis failover tests: a primary SIGKILLed under a few thousand messages, and the cost of waiting for replicas (own servers, ~8 min)
	ROUTER_TEST_SENTINEL=1 $(BIN)/pytest tests/integration/sentinel tests/unit/backends/test_sentinel_settings.py -s

sentinel-up: ## Start Redis with Sentinel beside the plain stack: primary :6391, replica :6392, Sentinels :26391-26393
	ops/stack.sh sentinel-up
	@ops/stack.sh sentinel-env

sentinel-down: ## Stop the Sentinel set (the plain stack keeps running)
	ops/stack.sh sentinel-down

sentinel-status: ## Show what the Sentinel set is running and which node is primary
	@ops/stack.sh sentinel-status

test-cluster: venv $(JARS) ## Redis Cluster tests: the pipeline on 3 primaries + 3 replicas, and a primary holding a table's slot SIGKILLed under load (own servers, ~5 min)
	ROUTER_TEST_CLUSTER=1 $(BIN)/pytest tests/integration/cluster tests/unit/backends/test_cluster_settings.py -s

cluster-up: ## Start a Redis Cluster beside the plain stack: 3 primaries and their replicas on :6401-6406
	ops/stack.sh cluster-up
	@ops/stack.sh cluster-env

cluster-down: ## Stop the Redis Cluster (the plain stack keeps running)
	ops/stack.sh cluster-down

cluster-status: ## Show what the Redis Cluster is running, each node's role and cluster state
	@ops/stack.sh cluster-status

stack-up-ha: venv jars ## Start the replicated cluster beside the plain stack: KRaft, 1 controller (:9290) + 3 brokers (:9291-9293), and Redis
	ops/stack.sh redis-start
	ops/stack.sh ha-up
	@ops/stack.sh ha-env

stack-down-ha: ## Stop the replicated cluster (the plain stack keeps running)
	ops/stack.sh ha-down

stack-status-ha: ## Show what the replicated cluster is running
	@ops/stack.sh ha-status

secure-up: venv jars ## Start the secured stack beside the plain one: Redis TLS+ACL on :6380, Kafka SASL_SSL on :9192
	ops/stack.sh secure-up

secure-down: ## Stop the secured stack
	ops/stack.sh secure-down

# Where `make dist` writes (tests/integration/ops/test_wheel_install.py sets a temporary one).
DIST ?= dist

dist: venv ## Build the wheel and the sdist into dist/ (python -m build, the hatchling backend)
	$(BIN)/python -m build --outdir $(DIST) .

test-fast: venv ## Unit tests only (no servers)
	$(BIN)/pytest tests/unit

segments-100mb: venv $(JARS) stack-up ## A 100 MiB message in segments: sender -> units -> receiver processes, checked by SHA-256, with each one's peak RSS
	$(BIN)/python -m ops.segments_proof $(ARGS)

spark-demo: venv jars ## Spark sender -> router -> Spark receiver end to end, checked (starts the stack if needed)
	$(BIN)/python -m ops.spark_demo $(ARGS)

spark-bench: venv jars stack-up ## Spark bench: rate source -> Spark sender (micro-batch, and real-time from an upstream topic) -> router -> Spark receiver, sustained msg/s, group latency and its hops at 5,000 and 2,500 msg/s offered (~20 min); .results/spark-bench
	$(BIN)/python -m ops.spark_bench $(ARGS)

clean: ## Remove the venv, caches and local stack data (stops the stack first)
	-ops/stack.sh down
	-ops/stack.sh secure-down
	-ops/stack.sh ha-down
	-ops/stack.sh sentinel-down
	-ops/stack.sh cluster-down
	rm -rf $(VENV) .cache .stack .results .pytest_cache .mypy_cache .ruff_cache .hypothesis
