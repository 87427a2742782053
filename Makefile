# The two front-door commands are `make demo` and `make test`; both do all set-up themselves.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Router processes started through make record themselves here; stack-down stops them.
export ROUTER_PID_DIR := $(CURDIR)/.stack/run/units

.PHONY: help venv jars stack-up stack-down stack-status lint fmt test test-fast demo chaos bench spark-demo clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

venv: $(STAMP) ## Create .venv and install the project with its dev, spark and bench extras

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (found " + sys.version.split()[0] + "); set PYTHON=/path/to/python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,spark,bench]'
	@touch $(STAMP)

jars: venv ## Fetch the Kafka broker and Spark connector jars from Maven Central (cached in .cache/)
	ops/stack.sh fetch-jars

stack-up: venv ## Start the local stack: Apache Kafka (KRaft) on 127.0.0.1:9092 and Redis on :6379
	ops/stack.sh up

stack-down: ## Stop the local stack; leaves no process of ours running
	ops/stack.sh down

stack-status: ## Show what the local stack is running
	@ops/stack.sh status

lint: venv ## ruff (lint + format check) and mypy --strict on router/ and ops/
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy router ops

fmt: venv ## Apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: venv jars lint ## Everything from a fresh clone: venv, jars, lint, stack, the whole suite
	$(BIN)/pytest

demo: venv jars stack-up ## Run the whole system end to end and check every guarantee
	$(BIN)/python -m ops.demo $(ARGS)

chaos: venv jars stack-up ## Chaos run: 100k messages, 20+ SIGKILLs, a broker and a Redis restart
	$(BIN)/python -m ops.chaos $(ARGS)

bench: venv jars stack-up ## Benchmark: raw relay vs units and whole path; table and plots in .results/bench
	$(BIN)/python -m ops.bench $(ARGS)

test-fast: venv ## Unit tests only (no servers)
	$(BIN)/pytest tests/unit

spark-demo: venv jars ## Spark sender -> router -> Spark receiver end to end, checked (starts the stack if needed)
	$(BIN)/python -m ops.spark_demo $(ARGS)

clean: ## Remove the venv, caches and local stack data (stops the stack first)
	-ops/stack.sh down
	rm -rf $(VENV) .cache .stack .results .pytest_cache .mypy_cache .ruff_cache .hypothesis
