# rectrain: `make run` (embedded default job), `make test`, `make bench`.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps build run test test-asan bench fuzz clean

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job on the embedded default: generate 1M synthetic Criteo rows in a temporary
# directory, preprocess them, train the small default DLRM and print its AUC beside the oracle's.
run: build
	$(BUILD)/rectrain train

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DREC_SANITIZE=ON >/dev/null
	cmake --build build-asan -j $(JOBS)
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
