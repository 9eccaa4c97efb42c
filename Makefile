# The front door. Every target forwards to a CMake preset (CMakePresets.json); each preset
# builds into build/<preset>/. Run `make help` for the list.
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all release debug asan tsan test deps deps-check help clean bench-cache bench-dispatch

all: release

help:
	@echo "make            release build: build/release/bin/ (also build/bin/); in a lab handout, only what the lab runs"
	@echo "make test       build and run every test (unit + black-box, every stage)"
	@echo "make tsan       the same tests under ThreadSanitizer (build/tsan/)"
	@echo "make asan       the same tests under AddressSanitizer + UBSan (build/asan/)"
	@echo "make debug      unoptimized build for gdb and Valgrind (build/debug/)"
	@echo "make cross-check    build for aarch64 (Raspberry Pi OS) and run the unit and black-box tests under qemu-user (build/cross/; CROSS_LABELS=unit: unit tests only, as CI)"
	@echo "make bench-cache     cache policy and wrapper throughput (Google Benchmark)"
	@echo "make bench-dispatch  cost of a thread per task vs a pool submit (Google Benchmark)"
	@echo "make sweep      the tuning curve: STAGE x WORKERS under wrk against an origin that collapses past 32 -> results/sweep/ (QUICK=1: ~20 s)"
	@echo "make sizing-sim the concurrency controllers against the origin's overload laws, in virtual time -> results/sizing-sim/ (SIM_ARGS)"
	@echo "make timeline   an origin that turns from fast to collapsing and back: stage 4 and fixed pools second by second -> results/timeline/"
	@echo "make bench      every stage side by side on the studies' scenarios -> results/bench/ (PEERS=1, QUICK=1)"
	@echo "make grade      grade every stage of this tree, or SUBMISSION=DIR [STAGES=1,3] [QUICK=1] -> results/grade/"
	@echo "make grade-mutants [MUTANTS=a,b] [REPEAT=N]   grade the reference, then each planted-bug mutant of stages 3 and 4 in stage mode and as the submission of each lab that grades it, N times each: every one must be caught with its hint, in the same score every run (not in a lab handout)"
	@echo "make grade-modes-check   stage mode and lab 3 mode in one build folder score as each alone (slow)"
	@echo "make gradescope LAB=N | STAGES=1,2,3,4   a Gradescope autograder zip -> results/gradescope/"
	@echo "make gradescope-check  the bundle's run_autograder against a simulated /autograder (slow)"
	@echo "make grade-all SUBMISSIONS=DIR [LAB=N] [JOBS=K]   every subfolder, resumable -> results/grade-all/gradebook.csv"
	@echo "make handout LAB=N   lab N's starter tree (TODO(student) stubs) -> build/handout/labN/ and labN.tar.gz"
	@echo "make grade LAB=N SUBMISSION=DIR   grade a student's lab N with labs/manifest.json's tests and points"
	@echo "make labs-check      every lab's starter builds warning-free and fails its visible tests (make test: lab 3)"
	@echo "make fuzz       libFuzzer targets for the parsers, FUZZ_SECONDS=N each (clang, build/fuzz/)"
	@echo "make soak       a mixed load against stages 3 and 4 for SOAK_SECONDS=N each; RSS and fds must stay flat"
	@echo "make e2e        the browser check: headless Chromium loads a page through every stage (installs chromium)"
	@echo "make deps       install every Debian package the project uses"
	@echo "make clean      remove build/ and this tree's own grader builds (make grade, grade-mutants: ~/.cache/proxy-grader/NAME-HASH/)"
	@echo "make clean-grade [LAB=N]   remove this tree's grader builds and the lab builds of make grade LAB=N (~/.cache/proxy-grader/labs/[labN/]), shared by every tree grading a lab on this machine"

deps:
	scripts/install-deps

# Installs only when something is missing, so a fresh machine needs no step before `make test`.
deps-check:
	@scripts/install-deps --if-missing build test

build/%/build.ninja: | deps-check
	cmake --preset $*

# In a lab handout (labs/HANDOUT) `make` builds the CMake target lab-programs: the stages, the
# origin, the sweep, cache-sim and the test binaries, not the grader, benchmarks and other tools.
release: deps-check build/release/build.ninja
	cmake --build --preset release -j $(JOBS) $(if $(wildcard labs/HANDOUT),--target lab-programs)
	@ln -sfn release/bin build/bin

debug: deps-check build/debug/build.ninja
	cmake --build --preset debug -j $(JOBS)

# make test, tsan and asan build what their tests run (CMake target tested-programs: all but the
# micro-benchmarks, stage-bench, cache-sim and soak, which `make` builds outside a handout); CI builds those after.
test: deps-check build/release/build.ninja
	cmake --build --preset release -j $(JOBS) --target tested-programs
	@ln -sfn release/bin build/bin
	ctest --preset release -j $(JOBS) $(CTEST_ARGS)
	@$(E2E_NOTICE)

asan: deps-check build/asan/build.ninja
	cmake --build --preset asan -j $(JOBS) --target tested-programs
	ctest --preset asan -j $(JOBS) $(CTEST_ARGS)

tsan: deps-check build/tsan/build.ninja
	cmake --build --preset tsan -j $(JOBS) --target tested-programs
	ctest --preset tsan -j $(JOBS) $(CTEST_ARGS)

# The Raspberry Pi path (docs/raspberry-pi.md): the whole tree built for aarch64 with Debian's
# cross compiler (preset cross, cmake/aarch64-linux-gnu.cmake), then the unit and black-box
# tests run under qemu-user. Installs its packages (install-deps cross) when they are missing.
.PHONY: cross-check deps-cross
deps-cross:
	@scripts/install-deps --if-missing build test cross

build/cross/build.ninja: | deps-cross
	cmake --preset cross

# CROSS_LABELS picks the ctest labels run under qemu-user: CI runs `unit` only (docs/raspberry-pi.md).
CROSS_LABELS ?= unit|blackbox
cross-check: deps-cross build/cross/build.ninja
	cmake --build --preset cross -j $(JOBS)
	ctest --preset cross -j $(JOBS) -L '$(CROSS_LABELS)' $(CTEST_ARGS)

# Micro-benchmarks (Google Benchmark); not part of `make test`.
bench-cache: release
	cmake --build --preset release -j $(JOBS) --target cache-bench
	build/release/bin/cache-bench $(BENCH_ARGS)

bench-dispatch: release
	cmake --build --preset release -j $(JOBS) --target dispatch-bench
	build/release/bin/dispatch-bench $(BENCH_ARGS)

# Also this tree's own grader builds (GRADE_TREE_DIR, below): no other tree builds there.
clean:
	rm -rf build
	$(if $(GRADE_TREE_NAME),rm -rf '$(call sq,$(GRADE_TREE_DIR))')

# --- Load measurements (docs/results.md): `make sweep`, `make bench` ----------------------
# Both need wrk and gnuplot (scripts/install-deps bench); `make bench PEERS=1` also squid,
# tinyproxy, nginx and varnish (scripts/install-deps peers). Only the programs they run are built.
# make sweep [STAGE=stage3-pool] [WORKERS="1 2 4 ..."] [CONNECTIONS=200] [DURATION=10]
#            (STAGE=stage4-tuned adds a --workers auto point per connection count: --auto)
#            [ORIGIN_DELAY_MS=20] [ORIGIN_CAPACITY=32] [ORIGIN_OVERLOAD=thrash|queue|fail]
#            [REFERENCE=stage4-tuned] [WORKLOAD=miss|hit] [QUICK=1]
# The default is the study's curve: an origin that thrashes past 32 requests in service, so the
# sweep climbs past the cores, peaks near 32 workers and collapses, with stage 4's own level
# drawn across it (REFERENCE= leaves it out). ORIGIN_OVERLOAD=queue ORIGIN_CAPACITY=0
# CONNECTIONS=100 is the friendly origin of the earlier runs (docs/results.md).
# make bench [DURATION=5] [BENCH_CONNECTIONS="1 10 100 400"] [POOL_WORKERS=128] [PEERS=1] [QUICK=1]
.PHONY: sweep bench deps-bench
STAGE ?= stage3-pool
WORKERS ?= 1 2 4 8 16 32 64 128
CONNECTIONS ?= 200
ORIGIN_DELAY_MS ?= 20
ORIGIN_CAPACITY ?= 32
ORIGIN_OVERLOAD ?= thrash
REFERENCE ?= $(if $(filter stage4-tuned,$(STAGE)),,stage4-tuned)
WORKLOAD ?= miss
BENCH_CONNECTIONS ?= 1 10 100 400
POOL_WORKERS ?= 128
ifeq ($(QUICK),1)
SWEEP_DURATION = $(or $(DURATION),2)
BENCH_DURATION = $(or $(DURATION),1)
else
SWEEP_DURATION = $(or $(DURATION),10)
BENCH_DURATION = $(or $(DURATION),5)
endif

deps-bench:
	@scripts/install-deps --if-missing build bench $(if $(filter 1,$(PEERS)),peers)

sweep: deps-bench build/release/build.ninja
	cmake --build --preset release -j $(JOBS) --target tuning-sweep origin $(STAGE) $(REFERENCE)
	build/release/bin/tuning-sweep --stage $(STAGE) --workers "$(WORKERS)" \
	  --connections "$(CONNECTIONS)" --duration $(SWEEP_DURATION) \
	  --delay-ms $(ORIGIN_DELAY_MS) --capacity $(ORIGIN_CAPACITY) --overload $(ORIGIN_OVERLOAD) \
	  --workload $(WORKLOAD) $(if $(REFERENCE),--reference $(REFERENCE)) \
	  $(if $(filter stage4-tuned,$(STAGE)),--auto) --out results/sweep

# make sizing-sim [SIM_ARGS="--overload queue --capacity 16 ..."]: every controller and the fixed
# sweep in virtual time (tools/sizing_sim.cpp), seconds of real time; gnuplot draws the PNG.
.PHONY: sizing-sim
sizing-sim: deps-bench build/release/build.ninja
	cmake --build --preset release -j $(JOBS) --target sizing-sim
	build/release/bin/sizing-sim --out results/sizing-sim $(SIM_ARGS)

# make timeline [PHASES="fast:10 thrash:10 fast:10"] [CONNS=200] [CAPACITY=32]: the origin
# changes character mid-run; stage 4 and fixed pools second by second (bench/timeline.sh).
.PHONY: timeline
timeline: deps-bench build/release/build.ninja
	cmake --build --preset release -j $(JOBS) --target origin stage3-pool stage4-tuned
	bench/timeline.sh

# make overshoot [CAPACITY=32] [CONNS=200] [DURATION=10]: lab 4's question 6 as a check — stage 4
# sized by Little's law alone, then with its origin limit, against an origin that thrashes
# (bench/overshoot.sh); prints each one's verdict. About 25 s.
.PHONY: overshoot
overshoot: deps-bench build/release/build.ninja
	cmake --build --preset release -j $(JOBS) --target origin stage4-tuned
	$(if $(CAPACITY),CAPACITY=$(CAPACITY)) $(if $(CONNS),CONNS=$(CONNS)) $(if $(DURATION),DURATION=$(DURATION)) bench/overshoot.sh

bench: deps-bench build/release/build.ninja
	cmake --build --preset release -j $(JOBS)
	build/release/bin/stage-bench --duration $(BENCH_DURATION) \
	  --connections "$(BENCH_CONNECTIONS)" --pool-workers $(POOL_WORKERS) \
	  $(if $(filter 1,$(PEERS)),--peers) --out results/bench

# ---- Grading (grader/README.md) ----------------------------------------------------------------
# make grade [SUBMISSION=DIR] [STAGES=1,3] [LAB=N] [QUICK=1]; make grade-mutants [MUTANTS=a,b] [REPEAT=N]
# LAB=N builds in one folder per lab (GRADE_BUILD_DIR/labN), reused by every submission of that lab:
# the grader lays each submission over the previous one's copy, so only the files that differ
# are recompiled (grader/README.md, "Minutes per submission"). Grade one lab N at a time there.
# The default folder is outside the tree graded (a student's own tree, when SUBMISSION=.).
# A self-grade (LAB=N, SUBMISSION=.) copies into the tests' build every object of this tree's own
# build/release that is up to date and compiled the same way (--reuse-build): only the files the
# grader's tests change, and the links, are compiled again. Never for someone else's tree.
SUBMISSION ?= .
GRADE_CACHE = $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/proxy-grader
GRADE_FLAGS = --submission $(SUBMISSION) $(if $(STAGES),--stages $(STAGES)) \
	$(if $(LAB),--lab $(LAB) --build-dir $(or $(GRADE_BUILD_DIR),$(GRADE_CACHE)/labs)) \
	$(if $(filter 1,$(QUICK)),--quick) $(if $(RUBRIC),--rubric $(RUBRIC)) \
	$(if $(and $(LAB),$(filter .,$(SUBMISSION)),$(wildcard build/release/.ninja_deps)),--reuse-build $(CURDIR)/build/release)
.PHONY: grade grade-mutants grade-modes-check grader clean-grade

# The folder where the grader builds this tree (SUBMISSION=.) in stage mode and for the mutants,
# named as grader/build.cpp's build_folder_name names it: the tree's name, then the first 8 hex
# digits of the 64-bit FNV-1a hash of its path (bash: the hash needs its 64-bit arithmetic).
sq = $(subst ','\'',$(1))
GRADE_TREE_NAME = $(shell bash -c 'h=-3750763034362895579; for c in $$(printf %s "$$0" | od -An -tu1 -v); \
  do h=$$(( (h ^ c) * 1099511628211 )); done; printf %s-%.8s "$$(basename -- "$$0")" $$(printf %016x $$h)' '$(call sq,$(CURDIR))')
GRADE_TREE_DIR = $(GRADE_CACHE)/$(GRADE_TREE_NAME)

# make clean-grade [LAB=N]: this tree's grader builds and the lab builds (lab N's alone with LAB),
# which every tree that grades a lab on this machine shares; a GRADE_BUILD_DIR is left alone.
clean-grade:
	@case '$(call sq,$(LAB))' in *[!0-9]*) echo "make clean-grade: LAB=$(LAB) is not a lab number" >&2; exit 2;; esac
	$(if $(GRADE_TREE_NAME),rm -rf '$(call sq,$(GRADE_TREE_DIR))')
	rm -rf '$(call sq,$(GRADE_CACHE))/labs$(if $(LAB),/lab$(LAB))'

grader: build/release/build.ninja
	@scripts/install-deps --if-missing build grade
	cmake --build --preset release -j $(JOBS) --target grader

grade: grader
	build/release/bin/grader $(GRADE_FLAGS) $(GRADE_ARGS)

# A lab handout has no grader/mutants/ (the patches show the reference code): say so before
# building anything.
grade-mutants:
	@test -d grader/mutants || { echo "make grade-mutants: grader/mutants/ is not in this tree. A lab handout leaves the planted bugs out (their patches show the reference code); they are run in the course's repository."; exit 2; }
	@$(MAKE) --no-print-directory grader
	build/release/bin/grader --mutants $(or $(MUTANTS),all) $(if $(REPEAT),--repeat $(REPEAT)) \
	  $(if $(filter 1,$(QUICK)),--quick) \
	  $(if $(wildcard build/release/.ninja_deps),--reuse-build $(CURDIR)/build/release) $(GRADE_ARGS)

# Stage mode and lab 3 mode on one submission (default this tree), each alone and each after the
# other in one build folder: the scores must agree (slow: real builds; make test runs the cheap
# version, grader.selftest.modes_do_not_share_builds).
grade-modes-check: grader
	cmake --build --preset release -j $(JOBS) --target gradebook
	grader/modes_test.sh build/release/bin/grader build/release/bin/gradebook $(abspath $(or $(SUBMISSION),.)) \
	  results/grade-modes-check --full

# Gradescope and many submissions (grader/README.md, "Gradescope", "Many submissions").
# make gradescope LAB=N | STAGES=1,2,3,4 -> results/gradescope/labN.zip | stages-1234.zip
# make gradescope-check [LAB=3] [GRADESCOPE_STAGES=1,2,3,4]: the bundles' run_autograder against
#   a simulated /autograder (setup, then reference, starter, non-compiling, missing file); slow.
# make grade-all SUBMISSIONS=DIR [LAB=N | STAGES=1,3] [JOBS=K]: every subfolder, K at a time
#   (default 1 unless JOBS is given on the command line), resumable -> results/grade-all/
.PHONY: gradescope gradescope-check grade-all
gradescope: grader
	cmake --build --preset release -j $(JOBS) --target gradebook lab-handout
	grader/gradescope/make-bundle.sh $(if $(LAB),--lab $(LAB)) $(if $(STAGES),--stages $(STAGES)) \
	  --handout build/release/bin/lab-handout --out results/gradescope

gradescope-check: grader
	cmake --build --preset release -j $(JOBS) --target gradebook lab-handout
	grader/gradescope/check.sh --lab $(or $(LAB),3) $(if $(GRADESCOPE_STAGES),--stages $(GRADESCOPE_STAGES)) \
	  --handout build/release/bin/lab-handout --work results/gradescope-check

grade-all: grader
	cmake --build --preset release -j $(JOBS) --target gradebook
	grader/grade-all.sh --submissions "$(SUBMISSIONS)" $(if $(LAB),--lab $(LAB)) $(if $(STAGES),--stages $(STAGES)) \
	  --jobs $(if $(filter command line,$(origin JOBS)),$(JOBS),1) --out $(or $(GRADE_ALL_OUT),results/grade-all) \
	  $(if $(filter 1,$(QUICK)),-- --quick)

# ---- Hardening (docs/hardening.md): fuzzing and the soak run; neither is part of `make test`. ----
# `make fuzz FUZZ_SECONDS=N` builds the libFuzzer targets with clang (build/fuzz/) and runs each
# for N seconds, starting from its seed corpus in fuzz/corpus/<target>/. New inputs it finds go
# to build/fuzz/corpus/<target>/; a crash stops the run and is saved in build/fuzz/crashes/.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= request uri chunked response_head
.PHONY: fuzz fuzz-build soak

fuzz-build:
	@scripts/install-deps --if-missing fuzz
	@test -f build/fuzz/build.ninja || cmake -S fuzz -B build/fuzz -G Ninja \
	  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build/fuzz -j $(JOBS)

fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/corpus/$$t build/fuzz/crashes/$$t; \
	  echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
	  build/fuzz/bin/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=build/fuzz/crashes/$$t/ build/fuzz/corpus/$$t fuzz/corpus/$$t \
	    || { echo "fuzz_$$t FAILED: the input is in build/fuzz/crashes/$$t/"; exit 1; }; \
	done

# `make soak SOAK_SECONDS=N` loads stages 3 and 4 (those built) for N seconds each with hits,
# misses, errors, slow clients and disconnects; fails when RSS or open descriptors climb. Then
# it stops every stage under Valgrind with transfers in flight; any error or lost block fails.
SOAK_SECONDS ?= 120
soak: release
	@scripts/install-deps --if-missing soak
	cmake --build --preset release -j $(JOBS) --target soak
	build/release/bin/soak --seconds $(SOAK_SECONDS) --bin-dir build/release/bin

# ---- Browser check: `make e2e`; tests/e2e/README.md ------------------------------------------
# Headless Chromium loads tests/e2e/site through every stage (ctest label `e2e`). `make e2e`
# installs Chromium when it is missing (scripts/install-deps e2e) and runs only this check;
# `make test` runs it whenever Chromium is installed, and E2E_NOTICE says so when it is not (its
# cases are then reported by ctest as skipped, never as passed).
.PHONY: e2e
E2E_NOTICE = test -x "$${CHROMIUM:-/usr/bin/chromium}" || \
	echo "e2e: chromium not installed — the browser check did not run; scripts/install-deps e2e"

e2e: build/release/build.ninja
	@scripts/install-deps --if-missing build test e2e
	cmake --build --preset release -j $(JOBS) --target e2e_tests
	ctest --preset release -L e2e $(CTEST_ARGS)

# ---- Labs (labs/README.md) -----------------------------------------------------------------------
# make handout LAB=N: build/handout/labN/ (the whole tree, lab N's regions and later labs' as
# TODO(student) stubs, no hidden tests, no mutants) and build/handout/labN.tar.gz.
# make grade LAB=N SUBMISSION=DIR is the grader's lab mode (the grading block above).
.PHONY: handout labs-check
# A handout tree (labs/HANDOUT) has later labs' stubs in place of the reference: a starter made
# from it would be false, so handout and labs-check say so before building anything.
.PHONY: not-in-a-handout
not-in-a-handout:
	@test ! -f labs/HANDOUT || { echo "make: this tree is a lab handout ($$(cat labs/HANDOUT)); starters are made and checked in the course's repository."; exit 2; }

handout: not-in-a-handout build/release/build.ninja
	@case "$(LAB)" in 1|2|3|4) ;; *) echo "usage: make handout LAB=N (N = 1, 2, 3 or 4)"; exit 2;; esac
	cmake --build --preset release -j $(JOBS) --target lab-handout
	rm -rf build/handout/lab$(LAB) build/handout/lab$(LAB).tar.gz
	build/release/bin/lab-handout --lab $(LAB) --source . --out build/handout/lab$(LAB) --tar

# make labs-check: every lab's starter builds warning-free and fails each of its visible tests
# naming its TODO(student) (make test checks lab 3 only; labs/README.md says why).
labs-check: not-in-a-handout release
	cmake --build --preset release -j $(JOBS) --target lab-handout
	ctest --preset release -R labs.visible_tests_exist
	@for lab in 1 2 3 4; do \
	  sh labs/tools/check-starter.sh starter build/release/bin/lab-handout $(CURDIR) \
	    build/release/labs-check $$lab || exit 1; \
	done
