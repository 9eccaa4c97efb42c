# The front door. Every target forwards to a CMake preset (CMakePresets.json); each preset
# builds into build/<preset>/. Run `make help` for the list.
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all release debug asan tsan test deps deps-check help clean bench-cache bench-dispatch

all: release

help:
	@echo "make            release build: build/release/bin/ (also build/bin/)"
	@echo "make test       build and run every test (unit + black-box, every stage)"
	@echo "make tsan       the same tests under ThreadSanitizer (build/tsan/)"
	@echo "make asan       the same tests under AddressSanitizer + UBSan (build/asan/)"
	@echo "make debug      unoptimized build for gdb and Valgrind (build/debug/)"
	@echo "make bench-cache     cache policy and wrapper throughput (Google Benchmark)"
	@echo "make bench-dispatch  cost of a thread per task vs a pool submit (Google Benchmark)"
	@echo "make deps       install every Debian package the project uses"
	@echo "make clean      remove build/"

deps:
	scripts/install-deps

# Installs only when something is missing, so a fresh machine needs no step before `make test`.
deps-check:
	@scripts/install-deps --if-missing build test

build/%/build.ninja: | deps-check
	cmake --preset $*

release: deps-check build/release/build.ninja
	cmake --build --preset release -j $(JOBS)
	@ln -sfn release/bin build/bin

debug: deps-check build/debug/build.ninja
	cmake --build --preset debug -j $(JOBS)

test: release
	ctest --preset release -j $(JOBS) $(CTEST_ARGS)

asan: deps-check build/asan/build.ninja
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS) $(CTEST_ARGS)

tsan: deps-check build/tsan/build.ninja
	cmake --build --preset tsan -j $(JOBS)
	ctest --preset tsan -j $(JOBS) $(CTEST_ARGS)

# Micro-benchmarks (Google Benchmark); not part of `make test`.
bench-cache: release
	build/release/bin/cache-bench $(BENCH_ARGS)

bench-dispatch: release
	build/release/bin/dispatch-bench $(BENCH_ARGS)

clean:
	rm -rf build

# ---- Grading (grader/, README "Grading") -------------------------------------------------------
# make grade [SUBMISSION=DIR] [STAGES=1,3] [LAB=N] [QUICK=1]; make grade-mutants [MUTANTS=a,b]
SUBMISSION ?= .
GRADE_FLAGS = --submission $(SUBMISSION) $(if $(STAGES),--stages $(STAGES)) \
	$(if $(LAB),--lab $(LAB)) $(if $(QUICK),--quick) $(if $(RUBRIC),--rubric $(RUBRIC))
.PHONY: grade grade-mutants grader

grader: build/release/build.ninja
	@scripts/install-deps --if-missing build grade
	cmake --build --preset release -j $(JOBS) --target grader

grade: grader
	build/release/bin/grader $(GRADE_FLAGS) $(GRADE_ARGS)

grade-mutants: grader
	build/release/bin/grader --mutants $(or $(MUTANTS),all) $(if $(QUICK),--quick) $(GRADE_ARGS)
