# A thin layer over CMake + Ninja. `make demo` and `make test` are the README's two commands:
# each installs what is missing, configures, builds, then runs the example or the tests.
# `make bench` does the same with PyTorch added (the benchmark's baseline) and runs the
# benchmark: one JSON line per workload (docs/performance.md).
BUILD := build
JOBS ?= $(shell nproc)

.PHONY: all deps bench-deps configure build demo test bench clean

all: build

deps:
	@scripts/install-deps.sh

bench-deps:
	@scripts/install-deps.sh --bench

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

clean:
	rm -rf $(BUILD)
