# A thin layer over CMake + Ninja. `make demo` and `make test` are the README's two commands:
# each installs what is missing, configures, builds, then runs the example or the tests.
# `make bench` does the same with PyTorch and JAX added (the benchmark's baselines) and runs the
# benchmark: one JSON line per workload (docs/performance.md). `make fuzz` builds the libFuzzer
# targets with clang-19 in build-fuzz/ and runs each for FUZZ_SECONDS (docs/fuzzing.md).
BUILD := build
FUZZ_BUILD := build-fuzz
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := idx_reader checkpoint_reader compile_cache_entry graph_builder npy_reader safetensors_reader

.PHONY: all deps bench-deps fuzz-deps configure build demo test bench fuzz clean test-sanitize test-asan test-tsan

all: build

deps:
	@scripts/install-deps.sh

# The bench's baselines: Debian's PyTorch 1.13 (apt), and today's peers, PyTorch 2.x and JAX
# from PyPI (pip; scripts/install-peers.sh says what it could not install). PEERS=0 skips pip.
PEERS ?= 1
bench-deps:
	@scripts/install-deps.sh --bench
	@if [ "$(PEERS)" != 0 ]; then scripts/install-peers.sh; fi

fuzz-deps:
	@scripts/install-deps.sh --fuzz

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The main example: an MLP trained on Fashion-MNIST over two CPU towers (about 20 s here).
demo: build
	@$(BUILD)/examples/fashion_mnist --towers cpu:0,cpu:1 --strategy sync --epochs 10 --ema 0.999

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: bench-deps build
	@$(BUILD)/bench/towerjit_bench

# Everything instrumented (libFuzzer coverage, ASan, UBSan) at -O1 with debug info, so a finding's
# stack names lines; no tests, examples or benchmarks in that build. Fails on any finding.
fuzz: fuzz-deps
	@cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
	  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DTOWERJIT_BUILD_FUZZERS=ON -DTOWERJIT_BUILD_TESTS=OFF \
	  -DTOWERJIT_BUILD_EXAMPLES=OFF -DTOWERJIT_BUILD_BENCH=OFF -DTOWERJIT_INSTALL=OFF > /dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The suite under sanitizers (docs/sanitizers.md), each in a build folder of its own:
# test-asan, the whole ctest suite with AddressSanitizer and UndefinedBehaviorSanitizer;
# test-tsan, the towers, thread-pool, pipeline and async tests with ThreadSanitizer.
# -O1 with line tables: quicker to build than -O3 and readable stacks. No benchmarks: no test
# runs them, and speed under a sanitizer measures nothing. Any report fails.
SANITIZE_FLAGS := -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1 -DNDEBUG" -DTOWERJIT_BUILD_BENCH=OFF

test-sanitize: test-asan test-tsan

test-asan: deps
	@cmake -S . -B build-asan -G Ninja $(SANITIZE_FLAGS) -DTOWERJIT_SANITIZE=address,undefined > /dev/null
	@cmake --build build-asan -j $(JOBS)
	@scripts/sanitizers/run-tests.sh asan build-asan

test-tsan: deps
	@cmake -S . -B build-tsan -G Ninja $(SANITIZE_FLAGS) -DTOWERJIT_SANITIZE=thread > /dev/null
	@cmake --build build-tsan -j $(JOBS) --target towerjit_tests fashion_mnist  # what its tests run
	@scripts/sanitizers/run-tests.sh tsan build-tsan

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) build-asan build-tsan
