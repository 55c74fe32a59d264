# jmsgateway: `make run` starts the gateway on its embedded broker, `make test` runs every test.
# Both set up what they need on a fresh machine: `make run` the runtime only (`pip install .`: no Kafka,
# JMS, Spark or test packages), `make test` everything (venv, every extra, Debian packages).
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
CONFIG  ?= etc/jmsgateway.toml
STAMP   := $(VENV)/.installed
RUNTIME := $(VENV)/.installed-runtime
# pytest-xdist workers: a test file (tests/pipeline/ as one unit: one SparkSession) per worker at a time
TEST_WORKERS ?= 6
PYTEST  := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --max-worker-restart 2 --durations=25
# the checkout's bytecode, written once before a run: where PYTHONDONTWRITEBYTECODE is set (CI machines set it),
# every process the tests start (~880 gateways) would otherwise compile the modules it imports from source,
# 0.18 s of a gateway's 0.7 s start (docs/performance.md); stale files are never used (Python checks the source)
BYTECODE := $(PY) -m compileall -q gateway plugins twisted tests bench

.PHONY: setup system-deps run test check unit integration test-random test-churn bench clean

$(STAMP): setup.cfg setup.py pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q '.[kafka,jms,spark,test]'
	touch $(STAMP) $(RUNTIME)

# the runtime only: what `make run` needs (a full setup has it too); --no-compile: the first start
# compiles the modules it imports (2 s) instead of pip compiling every installed file (10 s).
# The installed package runs (its hot modules compiled by mypyc: setup.py), so an edit reinstalls it.
SOURCES := $(shell find gateway twisted plugins etc -name '*.py' -o -name '*.toml' -o -name '*.json' 2>/dev/null)
$(RUNTIME): setup.cfg setup.py pyproject.toml $(SOURCES)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-compile --disable-pip-version-check .
	touch $(RUNTIME)

setup: $(STAMP)

system-deps:
	bash scripts/install-system-deps.sh

run: $(RUNTIME)
	$(VENV)/bin/twistd -n jmsgateway --config $(CONFIG)

check: setup
	$(VENV)/bin/ruff check gateway plugins tests bench twisted
	$(VENV)/bin/mypy gateway
	$(VENV)/bin/mypy tests
	$(VENV)/bin/lint-imports

unit: setup
	$(PY) -m pytest -q tests/unit

integration: setup system-deps
	$(BYTECODE)
	$(PYTEST) tests/integration tests/pipeline

test: setup system-deps check
	$(BYTECODE)
	$(PYTEST) tests

# The property tests with new random examples (the suite's own runs are derandomized: tests/conftest.py);
# JMSGATEWAY_MODEL_EXAMPLES=3000 makes the broker model's runs longer (each test may take an hour
# then, not the suite's 300 s).
test-random: setup system-deps
	$(PYTEST) --timeout=3600 -o faulthandler_timeout=3590 -m hypothesis --hypothesis-profile=random tests/unit tests/integration/test_selector_differential.py

# Kafka fleet attacks with member churn (tests/integration/churn_kafka_fleet_attacks.py): not in the suite,
# because on Tansu a member that leaves a second after joining can leave its group assigning nothing for a
# minute (docs/kafka.md); JMSGATEWAY_KAFKA_BOOTSTRAP=host:port runs them against a real Kafka.
test-churn: setup system-deps
	$(PYTEST) tests/integration/churn_kafka_fleet_attacks.py

bench: setup system-deps
	$(PY) -m bench

clean:
	rm -rf $(VENV) build *.egg-info var .pytest_cache .mypy_cache .ruff_cache
