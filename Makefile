# rectrain: `make run` (embedded default job), `make test`, `make bench`.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps build run test test-asan bench fuzz clean

all: build

deps:
	@./scripts/install-deps.sh

# Configuring a build folder. Its Makefile is the sentinel: CMake writes it only when configure
# and generate succeed, and make deletes it when interrupted while writing it, so a failed or
# interrupted configure runs again on the next make. That run starts from a clean cache, since
# the cache a failed configure leaves may hold the very setting that failed (a compiler that
# does not exist, a library not yet installed). `| deps`: configure only once the dependencies
# are installed, whatever -j.
configure = rm -rf $(1)/CMakeCache.txt $(1)/CMakeFiles && cmake -S . -B $(1) $(2) >/dev/null

$(BUILD)/Makefile: | deps
	$(call configure,$(BUILD),-DCMAKE_BUILD_TYPE=Release)

build-asan/Makefile: | deps
	$(call configure,build-asan,-DCMAKE_BUILD_TYPE=Debug -DREC_SANITIZE=ON -DREC_WITH_CUDA=OFF)

build: $(BUILD)/Makefile
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory
	@echo "rectrain: built $(BUILD)/rectrain"


# The main job on the embedded default: generate 1M synthetic Criteo rows in a temporary
# directory, preprocess them, train the small default DLRM and print its AUC beside the oracle's.
run: build
	$(BUILD)/rectrain train

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: build-asan/Makefile
	@cmake --build build-asan -j $(JOBS) -- --no-print-directory
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

bench: build
	$(BUILD)/rectrain bench prep
	$(BUILD)/rectrain bench mlp
	$(BUILD)/rectrain bench train

fuzz:
	REC_FUZZ=1 ./scripts/install-deps.sh
	./scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) build-asan build-fuzz
