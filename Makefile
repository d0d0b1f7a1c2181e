# titan.cpp — thin wrapper over CMake.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build test test-long train sft bench fuzz clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The quick suite: every test but the long end-to-end ones (ctest label `long`: the SFT arithmetic
# demonstration, the multi-rank CLI runs), which `make test-long` runs.
test: build
	cd $(BUILD) && ctest --output-on-failure -j 1 -LE long

test-long: build
	cd $(BUILD) && ctest --output-on-failure -j 1 -L long

# Trains the debug model, then prints a short greedy sample from its HF export (the last step's).
train: build
	$(BUILD)/titan train --config recipes/debug.toml
	@hf=$$(ls -d outputs/debug/checkpoint/step-*-hf | sort -t- -k2 -n | tail -1) && \
	  echo "--- greedy sample from $$hf:" && \
	  $(BUILD)/titan generate --model "$$hf" --prompt "The" --temperature 0 --max-new-tokens 32

# Supervised fine-tuning demonstration: the arithmetic chat data, recipes/sft_arithmetic.toml, then
# greedy answers from its HF export to two questions the training split does not hold.
sft: build
	$(BUILD)/titan data make-arithmetic --output outputs/arithmetic
	$(BUILD)/titan train --config recipes/sft_arithmetic.toml
	@hf=$$(ls -d outputs/sft_arithmetic/checkpoint/step-*-hf | sort -t- -k2 -n | tail -1) && \
	  for q in $$(head -2 outputs/arithmetic/valid.jsonl | sed -E 's/.*"What is ([0-9]+) \+ ([0-9]+)\?".*/\1+\2/'); do \
	    a=$${q%+*} b=$${q#*+}; echo "--- What is $$a + $$b? (greedy, $$hf)"; \
	    $(BUILD)/titan generate --model "$$hf" --chat --prompt "What is $$a + $$b?" --temperature 0 --max-new-tokens 12; \
	  done

fuzz: deps
	TITAN_FUZZ_DEPS=1 bash scripts/install-deps.sh
	cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DTITAN_FUZZ=ON -DTITAN_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build-fuzz -j $(JOBS)
	bash scripts/run-fuzzers.sh build-fuzz $${FUZZ_SECONDS:-60}

bench: build
	bash bench/run.sh

clean:
	rm -rf $(BUILD) build-fuzz
