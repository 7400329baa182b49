# pitstop — two commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The slowest tests are listed at the end of every run, so that CI shows where the time goes,
# every skipped test with its reason (a missing chromium, sshd, promtool, ...), and every
# failure and error by name with its message: CI shows only the end of the output.
PYTEST_ARGS ?= --durations=25 -rfEs
# Tests run in this many processes (pytest-xdist): the long rehearsals mostly wait on real
# components (a node's reboot, an observe window), so two of them share two cores well. Every
# process has its own session stack, ports and temporary directory. 0 runs them in this one.
PYTEST_WORKERS ?= 2

.PHONY: demo test test-loaded lint bench fmt clean venv sysdeps

venv: $(STAMP)

# The venv is rebuilt whenever pyproject.toml changes, so a fresh clone and an old
# checkout converge on the same set of packages.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip
	$(BIN)/python -m pip install -q -e '.[dev,sim]'
	@touch $(STAMP)

# System packages the real-component tests need (OpenSSH server for the SSH modules,
# Prometheus for the alert pack and the embedded stack's Prometheus, chromium for the UI tests).
# Installed only when missing and only when we may (root); otherwise those tests say why
# they cannot run.
sysdeps:
	@missing=""; \
	{ command -v sshd >/dev/null 2>&1 || test -x /usr/sbin/sshd; } || missing="$$missing openssh-server"; \
	command -v sudo >/dev/null 2>&1 || missing="$$missing sudo"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing"; \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
				|| echo "warning: could not install$$missing"; \
		else echo "note:$$missing missing and not root; SSH tests will be skipped with a reason"; fi; \
	fi
	@# Debian's chromium for the browser tests of the Temporal UI (Playwright drives it; it never
	@# downloads a browser of its own). Without it those tests are skipped with the reason.
	@if ! test -x /usr/bin/chromium; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing chromium"; \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null) \
				|| echo "warning: could not install chromium; the browser tests will be skipped with a reason"; \
		else echo "note: chromium missing and not root; the browser tests will be skipped with a reason"; fi; \
	fi
	@# Debian's prometheus: promtool for the alert pack's tests, /usr/bin/prometheus for
	@# `pitstop dev up --with prometheus`. Its package service must not start (nor listen on
	@# 9090): a policy-rc.d that forbids starting services is in place during the install
	@# (Docker images already have one), and on systemd the unit is disabled and stopped.
	@if ! { command -v promtool >/dev/null 2>&1 || test -x /usr/bin/promtool; }; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing prometheus"; guard=""; \
			if [ ! -e /usr/sbin/policy-rc.d ]; then \
				printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && guard=1; \
			fi; \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) \
				|| echo "warning: could not install prometheus"; \
			if [ -n "$$guard" ]; then rm -f /usr/sbin/policy-rc.d; fi; \
			if [ -d /run/systemd/system ]; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi; \
			if command -v update-rc.d >/dev/null 2>&1 && [ -e /etc/init.d/prometheus ]; then update-rc.d prometheus disable >/dev/null 2>&1 || true; fi; \
		else echo "note: promtool missing and not root; alert-pack tests will be skipped with a reason"; fi; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: $(STAMP) sysdeps lint
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

# The whole suite with every core saturated by another process (stress-ng, one CPU hog per
# core, at the same priority as the tests): tests wait on conditions, never on a sleep being
# long enough, so they must pass here too. stress-ng is installed with apt-get when missing.
test-loaded: $(STAMP) sysdeps lint
	@command -v stress-ng >/dev/null 2>&1 || { [ "$$(id -u)" = "0" ] && apt-get install -y -qq stress-ng >/dev/null; } \
		|| { echo "test-loaded needs stress-ng (apt-get install stress-ng)"; exit 2; }
	@stress-ng --cpu $$(nproc) --quiet & hog=$$!; trap 'kill $$hog' EXIT; \
		echo "stress-ng: $$(nproc) CPU hogs (pid $$hog)"; $(BIN)/pytest -q -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

demo: $(STAMP) sysdeps
	$(BIN)/pitstop demo

bench: $(STAMP) sysdeps
	@for b in bench/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	-$(BIN)/pitstop dev down 2>/dev/null
	rm -rf $(VENV) .pitstop .pytest_cache .mypy_cache .ruff_cache
