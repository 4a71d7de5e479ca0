# make run   - set up, then train the default supernet on Fashion-MNIST, search a family of three
#              budgets, export every member and print the family's table
# make test  - set up (and PostgreSQL for the storage tests), then run the test suite
# make test-fast - set up, then run the suite less its tests marked slow or gpu (under 2 minutes)
# make bench-list - every benchmark's commands with their cost class (seconds, minutes, hours)
# make bench - set up, print that list, then run the seconds- and minutes-class commands that need no
#              trained run or GPU, one after another (benchmarks/__init__.py holds the list)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FASHION_MNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
CONFIG ?= fashion_mnist_mbv3
RUN ?= fashion_mnist_mbv3
# The family: one subnet per MACs budget, at 35%, 50% and 75% of the way from the min to the max
# subnet; evaluations per member (an arch a smaller member evaluated is not evaluated again).
MEMBERS ?= 35%,50%,75%
TRIALS ?= 20
# Each member's fine-tune before it ships (nas export --finetune), a share of the run's steps: the
# config's own quarter (536 steps a member). Measured from a fresh clone on an idle 2-core machine,
# the whole job, set-up included, took 14 min 52 s; FINETUNE=12% saves about 1.5 minutes and ships
# each member 0.25-1.0 points lower (benchmarks/notes/28-family-finetunes.md, benchmarks/notes/29-family-make-run-vit.md).
FINETUNE ?= 25%
FAMILY := runs/$(RUN)/search/make-run-family
# FINALISTS=4: the search's 4 best archs fine-tuned alone and measured again (nas search
# --finalists), 2 at a time. Off by default: behind the default score it gained nothing (cell201
# +0.01, MobileNetV3 -0.20 points of standalone accuracy on average over 6 searches each, for 1-7
# CPU-minutes a search; benchmarks/notes/17-default-path.md); it helps a search ranked by the supernet.
FINALISTS ?= 0
FINALIST_FLAGS := $(if $(filter-out 0,$(FINALISTS)),--finalists $(FINALISTS) --workers 2)
# Two OpenMP threads per process; torch processes started side by side set their own.
export OMP_NUM_THREADS ?= 2

.PHONY: setup data postgres run run-supernet run-alone test test-fast bench bench-list clean

setup: $(STAMP) data

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,onnx,postgres]'
	touch $(STAMP)

data:
	@if [ -f $(FASHION_MNIST) ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist; \
	else \
		echo "Fashion-MNIST is missing; install it with: sudo apt-get install dataset-fashion-mnist"; \
		exit 1; \
	fi

# The server the search-storage tests start on the loopback address (tests/support/postgres.py):
# Debian's postgresql, installed when missing and make runs as root; elsewhere those tests skip.
postgres:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	else \
		echo "PostgreSQL is missing: its storage tests skip (install it with: sudo apt-get install -y postgresql)"; \
	fi

# Where the supernet does not pay (`nas space CONFIG --supernet-pays` exits 1: the config's exports
# fine-tune for a whole training, as cell201's do), the family is searched on the untrained config
# by the zero-cost default and each member is trained alone from scratch: the cheaper path.
run: setup
	$(BIN)/nas space $(CONFIG)
	@if $(BIN)/nas space $(CONFIG) --supernet-pays; then \
		$(MAKE) --no-print-directory run-supernet; \
	else \
		$(MAKE) --no-print-directory run-alone; \
	fi

run-supernet:
	@if [ -f runs/$(RUN)/config.yaml ]; then \
		$(BIN)/nas train $(CONFIG) --name $(RUN) --resume; \
	else \
		$(BIN)/nas train $(CONFIG) --name $(RUN); \
	fi
	$(BIN)/nas search $(RUN) --searcher evolution --max-macs $(MEMBERS) --trials $(TRIALS) $(FINALIST_FLAGS) --out $(FAMILY)
	$(BIN)/nas export $(RUN) --family $(FAMILY) --finetune $(FINETUNE)
	$(BIN)/nas summary $(FAMILY)

run-alone:
	$(BIN)/nas search $(CONFIG) --searcher evolution --max-macs $(MEMBERS) --trials $(TRIALS) --out $(FAMILY)
	$(BIN)/nas export $(CONFIG) --family $(FAMILY)
	$(BIN)/nas summary $(FAMILY)

# Two pytest workers of one thread each: the suite's torch processes share the 2 cores. Both list
# their 15 slowest tests at the end.
test: setup postgres
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --durations=15

test-fast: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --durations=15 -m "not slow and not gpu"

# The list needs nothing installed (the registry is plain Python); the runs need the package.
bench-list:
	$(PYTHON) -m benchmarks

bench: setup
	$(BIN)/python -m benchmarks --run

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
