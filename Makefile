# A thin layer over CMake + Ninja. `make demo` and `make test` are the README's two commands:
# each installs what is missing, configures, builds, then runs the example or the tests.
BUILD := build
JOBS ?= $(shell nproc)

.PHONY: all deps configure build demo test clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@$(BUILD)/examples/mlp_gradients

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
