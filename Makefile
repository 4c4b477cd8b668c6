# zerolab — plain Make.
#   make            CPU programs (build/cpu/*), and CUDA programs (build/cuda/*) when nvcc is found
#   make demo       install deps if missing, run the demo (the GPUs the job may use, else 4 CPU ranks)
#   make test       install deps if missing, unit tests (plain and ASan+UBSan) + integration tests (CPU)
#   make test-gpu   GPU kernel comparison + integration tests against build/cuda (on a GPU machine)
#   build/cuda/bench_attention   attention: strided-batched cuBLASLt vs a fused kernel (docs/performance.md)
#   build/cuda/bench_gemm_tune   the block GEMMs: cuBLASLt's first algorithm vs its top 16, timed (docs/performance.md)
#   build/cuda/bench_gpt_step    one GPT step's compute, call by call: GEMMs, attention, memory-bound kernels
#   make test-gpt-reference  --model gpt vs PyTorch, on build/cpu (PYTHON= a python with torch)
#   make clean
# MPI comes from the mpicc wrapper (MPICC=... to override), so MPICH and Open MPI both work.

MPICC     ?= mpicc
# The tests' fp16 reference is the compiler's _Float16: GCC >= 12 or Clang >= 15. Where mpicc's
# compiler lacks it (Ubuntu 22.04: gcc 11) and a gcc-14, gcc-13 or gcc-12 has it, mpicc is told to
# use that one (MPICH_CC, OMPI_CC; exported, so sub-makes take it as set), and so is $(CC) unless
# given. Setting MPICH_CC or OMPI_CC yourself skips this.
HAS_FLOAT16 = printf '_Float16 x;\n' | $(1) -x c -c - -o /dev/null >/dev/null 2>&1
ifeq ($(origin MPICH_CC)$(origin OMPI_CC),undefinedundefined)
FLOAT16_CC := $(shell $(call HAS_FLOAT16,$(MPICC)) || for c in gcc-14 gcc-13 gcc-12; do \
  command -v $$c >/dev/null 2>&1 && $(call HAS_FLOAT16,MPICH_CC=$$c OMPI_CC=$$c $(MPICC)) && { echo $$c; break; }; done)
ifneq ($(FLOAT16_CC),)
export MPICH_CC := $(FLOAT16_CC)
export OMPI_CC  := $(FLOAT16_CC)
ifeq ($(origin CC),default)
export CC := $(FLOAT16_CC)
endif
endif
endif
# The launcher of the MPI that MPICC belongs to (the mpiexec beside it), else the first on PATH:
# another MPI's launcher would start N separate one-rank jobs.
ifndef MPIEXEC
MPIEXEC   := $(or $(wildcard $(dir $(shell command -v $(MPICC) 2>/dev/null))mpiexec),mpiexec)
endif
# The tests run up to 9 ranks on small machines, and containers run as root: Open MPI refuses both
# unless told (4.x: OMPI_MCA_…, 5.x: PRTE_MCA_…); MPICH ignores these variables.
export OMPI_MCA_rmaps_base_oversubscribe ?= 1
export PRTE_MCA_rmaps_default_mapping_policy ?= core:oversubscribe
export OMPI_ALLOW_RUN_AS_ROOT ?= 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM ?= 1
# Open MPI binds each rank to one core at N <= 2 (host Adam then gets one thread, and the tests'
# jobs share that core); run unbound, as MPICH does.
export OMPI_MCA_hwloc_base_binding_policy ?= none
export PRTE_MCA_hwloc_default_binding_policy ?= none
# Ubuntu 22.04's MPICH loads libinfinipath, whose constructor turns SIGABRT, SIGSEGV, SIGTERM, ...
# into a backtrace, a NAME.80s-PID,HOST.btr file and exit(1) unless this is set.
export IPATH_NO_BACKTRACE ?= 1
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90

# OpenMP: host Adam (--offload). -fno-lto: some distributions' mpicc adds -flto (Ubuntu 22.04),
# which drops Criterion's table of tests (the binaries then run none and pass).
CFLAGS_COMMON = -std=c11 -O2 -g -Wall -Wextra -Werror -ffp-contract=off -fno-lto -pthread -fopenmp -I. -Ikernels
CFLAGS  ?= $(CFLAGS_COMMON)
LIBS     = -lcjson -lm  # cJSON: checkpoint manifests (xxHash, their checksums, is header-only)
SAN      = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

# NCCL: NCCL_HOME (or a module's NCCL_ROOT), then CUDA_HOME, then the system paths (they differ
# between machines: the multiarch directory is /usr/lib/aarch64-linux-gnu on a GH200 node).
NCCL_HOME ?= $(NCCL_ROOT)
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
NCCL_INC_DIR := $(firstword $(foreach d,$(NCCL_HOME)/include $(CUDA_HOME)/include /usr/include,$(if $(wildcard $(d)/nccl.h),$(d))))
NCCL_LIB_DIR := $(firstword $(foreach d,$(NCCL_HOME)/lib $(NCCL_HOME)/lib64 $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib \
                  $(if $(MULTIARCH),/usr/lib/$(MULTIARCH)) /usr/lib/x86_64-linux-gnu /usr/lib64,$(if $(wildcard $(d)/libnccl.so),$(d))))
# The CUDA programs are built when nvcc and NCCL (header and library) are all found; nvcc
# without NCCL says so, rather than leave `make cuda` with nothing to do.
NVCC_FOUND := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo yes)
HAVE_NVCC := $(if $(and $(NCCL_INC_DIR),$(NCCL_LIB_DIR)),$(NVCC_FOUND))
$(if $(and $(NVCC_FOUND),$(if $(HAVE_NVCC),,x)),$(warning nvcc found but not NCCL (nccl.h: $(or $(NCCL_INC_DIR),none), \
  libnccl.so: $(or $(NCCL_LIB_DIR),none)): building the CPU programs only; set NCCL_HOME))
# MPI include flags for nvcc (mpicc -showme:compile on Open MPI, mpicc -show on MPICH).
MPI_INC = $(shell $(MPICC) -showme:compile 2>/dev/null || $(MPICC) -show 2>/dev/null | tr ' ' '\n' | grep '^-I')

# The commit the programs were built from, for the report ("unknown" outside git). Kept in a
# stamp that changes only when the description does, so report.c recompiles only then; a
# tree copied without .git (a GPU machine) keeps the last description it was built with.
GIT_COMMIT := $(shell git describe --always --dirty 2>/dev/null)
$(shell mkdir -p build; if [ -n "$(GIT_COMMIT)" ]; then \
    [ "$$(cat build/git-commit 2>/dev/null)" = "$(GIT_COMMIT)" ] || echo "$(GIT_COMMIT)" > build/git-commit; \
  elif [ ! -f build/git-commit ]; then echo unknown > build/git-commit; fi)
ZL_COMMIT  := $(shell cat build/git-commit)
CFLAGS_COMMON += -DZL_GIT_COMMIT='"$(ZL_COMMIT)"'

STAGES   := stage0_ddp stage1 stage2 stage3
COMMON   := common/util.c common/alloc.c common/events.c common/partition.c common/formulas.c common/comm.c \
            common/args.c common/runtime.c common/report.c common/watchdog.c common/outputs.c common/preflight.c \
            common/scaler.c common/numerics.c common/ckpt.c common/trace.c common/offload.c common/throughput.c common/clocks.c \
            common/stdout_check.c common/gemm_table.c common/replace.c \
            model/layout.c \
            model/gpt_layout.c model/model.c model/mlp.c model/gpt.c model/gpt_data.c
CPU_SRC  := kernels/storage.c kernels/cpu/kernels_cpu.c kernels/cpu/adam_host.c kernels/cpu/kernels_dispatch_cpu.c kernels/cpu/backend_cpu.c \
            kernels/gpu_select.c kernels/cpu/gpt_cpu.c kernels/cpu/gpt_dispatch_cpu.c
HEADERS  := $(wildcard common/*.h model/*.h kernels/*.h kernels/cpu/*.h kernels/cuda/*.h kernels/cuda/*.cuh)

CPU_OBJ  := $(patsubst %.c,build/cpu/obj/%.o,$(COMMON) $(CPU_SRC))
CUDA_OBJ := $(patsubst %.c,build/cuda/obj/%.o,$(COMMON) kernels/storage.c kernels/cpu/kernels_cpu.c kernels/cpu/adam_host.c kernels/gpu_select.c \
                                              kernels/cpu/gpt_cpu.c kernels/cuda/backend_cuda.c kernels/cuda/nvml.c) \
            build/cuda/obj/kernels/cuda/kernels_cuda.o build/cuda/obj/kernels/cuda/gpt_cuda.o \
            build/cuda/obj/kernels/cuda/gpt_flash.o
# cJSON writes the report and the checkpoint manifests; a GPU machine may have no cJSON, so the
# CUDA programs carry theirs in build/cuda/lib/ (found through an rpath of $ORIGIN/lib), as
# build/gpu-tests does.
# NCCL's directory goes first, so that NCCL_HOME wins over a CUDA toolkit that ships NCCL too — at
# link time; at run time LD_LIBRARY_PATH comes first (the rpath is a RUNPATH), so a module's NCCL
# there is the one loaded: the report prints its version (JSON run.nccl_version).
CUDA_LIBS = -Wl,-rpath,'$$ORIGIN/lib' $(if $(NCCL_LIB_DIR),-L$(NCCL_LIB_DIR) -Wl$(comma)-rpath$(comma)$(NCCL_LIB_DIR)) \
            -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lnccl -lstdc++ -ldl $(LIBS)
comma := ,

CPU_BINS  := $(addprefix build/cpu/,$(STAGES))
CUDA_BINS := $(if $(HAVE_NVCC),$(addprefix build/cuda/,$(STAGES)) build/cuda/test_kernels_gpu \
                                 build/cuda/bench_attention build/cuda/bench_gemm_tune build/cuda/bench_gpt_step build/cuda/bench_pinned_copy)

.SECONDARY:
.PHONY: all cpu cuda demo notebooks results-cpu test test-unit test-asan test-zerocalc test-integration test-scripts test-words test-gpu test-gpt-reference deps deps-run float16-check clean
all: cpu $(if $(HAVE_NVCC),cuda)
cpu: $(CPU_BINS) build/zerocalc build/zlckpt build/zlbatch build/bench_host_adam
cuda: $(CUDA_BINS)

# ---- CPU backend ----
build/cpu/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -c $< -o $@

build/cpu/%: build/cpu/obj/%.o $(CPU_OBJ)
	$(MPICC) $(CFLAGS) $^ $(LIBS) -o $@

# report.c names the commit: rebuild it when the commit changes.
build/cpu/obj/common/report.o build/cuda/obj/common/report.o: build/git-commit

# zerocalc: no MPI, no GPU — only the formula, partition and model-layout modules the stages use
# (and the tools' check that stdout took the report).
CALC_SRC := common/formulas.c common/partition.c model/layout.c model/gpt_layout.c common/stdout_check.c
build/zerocalc: tools/zerocalc.c $(CALC_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) tools/zerocalc.c $(CALC_SRC) -lm -o $@

# zlckpt: inspect, verify, export a checkpoint (common/ckpt.c; the CPU backend for its host copies).
build/zlckpt: build/cpu/obj/tools/zlckpt.o $(CPU_OBJ)
	$(MPICC) $(CFLAGS) $^ $(LIBS) -o $@

# zlbatch: the tokens of a GPT run's step 1 (tests/gpu/torch_gpt_reference.py reads them).
build/zlbatch: build/cpu/obj/tools/zlbatch.o $(CPU_OBJ)
	$(MPICC) $(CFLAGS) $^ $(LIBS) -o $@

# bench_host_adam: the host Adam's throughput on this CPU, scalar reference vs vectorised (README).
build/bench_host_adam: build/cpu/obj/bench/host_adam.o $(CPU_OBJ)
	$(MPICC) $(CFLAGS) $^ $(LIBS) -o $@

# ---- CUDA backend (same stage sources) ----
build/cuda/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(if $(NCCL_INC_DIR),-I$(NCCL_INC_DIR)) -I$(CUDA_HOME)/include -c $< -o $@

NVCC_FLAGS = -std=c++17 -O3 -lineinfo $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror -I. -Ikernels $(MPI_INC) \
             $(if $(NCCL_INC_DIR),-I$(NCCL_INC_DIR))
build/cuda/obj/kernels/cuda/%.o: kernels/cuda/%.cu $(HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

build/cuda/%: build/cuda/obj/%.o $(CUDA_OBJ) build/cuda/lib/.cjson
	$(MPICC) $(CFLAGS) $(filter-out %/.cjson,$^) $(CUDA_LIBS) -o $@

build/cuda/test_kernels_gpu: build/cuda/obj/tests/gpu/test_kernels_gpu.o $(CUDA_OBJ) build/cuda/lib/.cjson
	$(MPICC) $(CFLAGS) $(filter-out %/.cjson,$^) $(CUDA_LIBS) -o $@

# bench_attention: zerolab's strided-batched cuBLASLt attention vs a fused kernel (bench/attention.cu,
# docs/performance.md). One GPU, run without mpiexec.
build/cuda/obj/bench/%.o: bench/%.cu bench/timing.cuh $(HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

build/cuda/bench_attention: build/cuda/obj/bench/attention.o $(CUDA_OBJ) build/cuda/lib/.cjson
	$(MPICC) $(CFLAGS) $(filter-out %/.cjson,$^) $(CUDA_LIBS) -o $@

# bench_gemm_tune: the MLP block's GEMMs with cuBLASLt's first algorithm (what the trainer runs)
# against the heuristic's other top candidates, timed and compared bit for bit (bench/gemm_tune.cu,
# docs/performance.md). One GPU, run without mpiexec; links the trainer's kernels to check its path.
build/cuda/bench_gemm_tune: build/cuda/obj/bench/gemm_tune.o $(CUDA_OBJ) build/cuda/lib/.cjson
	$(MPICC) $(CFLAGS) $(filter-out %/.cjson,$^) $(CUDA_LIBS) -o $@

# bench_gpt_step: one GPT step's compute, call by call (the model's own zl_gpt_* calls at one
# rank's shape, timed alone, times how often a step runs each; bench/gpt_step.cu). One GPU.
build/cuda/bench_gpt_step: build/cuda/obj/bench/gpt_step.o $(CUDA_OBJ) build/cuda/lib/.cjson
	$(MPICC) $(CFLAGS) $(filter-out %/.cjson,$^) $(CUDA_LIBS) -o $@

# bench_pinned_copy: pinned host <-> device copy bandwidth, each GPU alone and all at once
# (under mpirun, one rank per GPU; bench/pinned_copy.c), also beside a host triad or host Adam
# (--load-threads T [--load triad|adam]). The CUDA runtime, MPI, OpenMP and the host Adam.
build/cuda/bench_pinned_copy: build/cuda/obj/bench/pinned_copy.o build/cuda/obj/common/util.o build/cuda/obj/kernels/gpu_select.o build/cuda/obj/kernels/cpu/adam_host.o build/cuda/obj/kernels/cpu/kernels_cpu.o build/cuda/obj/kernels/storage.o
	$(MPICC) $(CFLAGS) $^ -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lm -o $@

# The cJSON shared library the CUDA programs load, copied (links resolved) next to them.
build/cuda/lib/.cjson:
	@mkdir -p $(dir $@)
	cp -L "$$($(CC) -print-file-name=libcjson.so.1)" $(dir $@)
	@touch $@

# ---- tests ----
UNIT_SRC := tests/test_kernels.c tests/test_common.c tests/test_gpu_select.c tests/test_numerics.c tests/test_ckpt_format.c \
            tests/test_gpt.c tests/test_host_adam.c
build/tests/test_unit: $(UNIT_SRC) tests/zl_ref_bf16.h $(COMMON) $(CPU_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(UNIT_SRC) $(COMMON) $(CPU_SRC) -lcriterion $(LIBS) -o $@

build/asan/test_unit: $(UNIT_SRC) tests/zl_ref_bf16.h $(COMMON) $(CPU_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS_COMMON) -O1 $(SAN) $(UNIT_SRC) $(COMMON) $(CPU_SRC) -lcriterion $(LIBS) -o $@

# The four programs under ASan + UBSan, run end to end by test-asan (MPICH's own allocations
# are not ours to free, hence detect_leaks=0).
ASAN_BINS := $(addprefix build/asan/,$(STAGES))
build/asan/%: %.c $(COMMON) $(CPU_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS_COMMON) -O1 $(SAN) $< $(COMMON) $(CPU_SRC) $(LIBS) -o $@

build/tests/test_zerocalc: tests/test_zerocalc.c tests/zl_test_util.h $(CALC_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) tests/test_zerocalc.c $(CALC_SRC) -lcriterion -lcjson -lm -o $@

# The integration tests: each spawns mpiexec with the programs as children (never runs under it).
INTEGRATION_TESTS := $(addprefix build/tests/,test_integration test_ckpt test_gpt_integration test_loud test_mixed \
                     test_offload test_report)
build/tests/test_mixed: kernels/zl_math.h # its independent reference reuses the data and init functions
build/tests/test_ckpt build/gpu-tests/test_ckpt: tests/zl_ref_bf16.h # the bf16 export against the unit tests' reference
$(INTEGRATION_TESTS): build/tests/%: tests/%.c tests/zl_test_util.h
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $< -lcriterion -lcjson -lm -o $@

# The integration tests (test_integration, test_loud, test_mixed, test_report, ...) for a GPU
# machine that has no Criterion/cJSON: built here, with their shared libraries next to them
# (found through an rpath of $ORIGIN/lib).
build/gpu-tests/test_%: tests/test_%.c tests/zl_test_util.h
	@mkdir -p $(dir $@)lib
	$(MPICC) $(CFLAGS) $< -lcriterion -lcjson -lm -Wl,--disable-new-dtags,-rpath,'$$ORIGIN/lib' -o $@
	ldd $@ | awk '/=> \// {print $$3}' | grep -v -E 'lib(c|m|pthread|dl|rt|resolv)\.so|/gpu-tests/lib/' | xargs -I{} cp -L {} $(dir $@)lib/

# Install what is missing: the programs need an MPI and cJSON; the tests also Criterion.
# The headers are looked for the way the build looks for them (the compiler's search path: CPATH,
# a cluster's modules), not at fixed paths.
HASH := \#
HAS_HEADERS = printf '$(foreach h,$(1),$(HASH)include <$(h)>\n)' | $(MPICC) -E -x c - >/dev/null 2>&1
deps-run:
	@command -v $(MPICC) >/dev/null 2>&1 && command -v $(MPIEXEC) >/dev/null 2>&1 \
	  && $(call HAS_HEADERS,cjson/cJSON.h xxhash.h) || scripts/install-deps.sh
deps: deps-run
	@$(call HAS_HEADERS,criterion/criterion.h cjson/cJSON.h) && command -v python3 >/dev/null 2>&1 || scripts/install-deps.sh
	@$(MAKE) -s --no-print-directory float16-check 2>/dev/null || { scripts/install-deps.sh; \
	  $(MAKE) -s --no-print-directory float16-check; }
# Run as a sub-make, so that it looks for a compiler with _Float16 after install-deps.sh.
float16-check:
	@$(call HAS_FLOAT16,$(MPICC)) || { echo "make test: the tests' fp16 reference is the compiler's \
	_Float16, which $$($(MPICC) -v 2>&1 | tail -1) lacks: GCC >= 12 or Clang >= 15 has it (make finds gcc-14, \
	gcc-13 or gcc-12 by itself unless MPICH_CC or OMPI_CC is set; Ubuntu 22.04: apt-get install gcc-12)" >&2; exit 1; }

test: deps
	$(MAKE) cpu build/tests/test_unit build/asan/test_unit $(ASAN_BINS) $(INTEGRATION_TESTS) build/tests/test_zerocalc
	$(MAKE) test-unit test-asan test-zerocalc test-integration test-scripts test-words

CRITERION = @tests/run-criterion.sh  # fails a binary that exits 0 having run no test
test-unit: build/tests/test_unit
	$(CRITERION) build/tests/test_unit -j2

test-asan: build/asan/test_unit $(ASAN_BINS)
	@ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 tests/run-criterion.sh build/asan/test_unit -j2
	@for p in $(STAGES); do \
	  ASAN_OPTIONS=detect_leaks=0 $(MPIEXEC) -n 3 build/asan/$$p --layers 3 --dim 31 --steps 3 --quiet \
	    >build/asan/$$p.log 2>&1 || { cat build/asan/$$p.log; echo "test-asan: $$p failed"; exit 1; }; \
	  echo "test-asan: $$p at N = 3 clean under ASan + UBSan"; \
	  ASAN_OPTIONS=detect_leaks=0 $(MPIEXEC) -n 2 build/asan/$$p --preset gpt-tiny --steps 2 --quiet \
	    --data data/persuasion.txt >build/asan/$$p.gpt.log 2>&1 || { cat build/asan/$$p.gpt.log; echo "test-asan: $$p --model gpt failed"; exit 1; }; \
	  echo "test-asan: $$p --preset gpt-tiny at N = 2 clean under ASan + UBSan"; \
	done
	@rm -rf build/asan/ckpt && ASAN_OPTIONS=detect_leaks=0 $(MPIEXEC) -n 3 build/asan/stage3 --layers 3 --dim 31 --steps 2 \
	  --quiet --save build/asan/ckpt --save-every 1 >build/asan/ckpt.log 2>&1 && ASAN_OPTIONS=detect_leaks=0 $(MPIEXEC) \
	  -n 2 build/asan/stage1 --layers 3 --dim 31 --steps 1 --quiet --resume build/asan/ckpt >>build/asan/ckpt.log 2>&1 \
	  || { cat build/asan/ckpt.log; echo "test-asan: checkpoint save/reshard failed"; exit 1; }
	@echo "test-asan: stage3 N = 3 save, stage1 N = 2 resume clean under ASan + UBSan"
	@for p in stage2 stage3; do \
	  ASAN_OPTIONS=detect_leaks=0 $(MPIEXEC) -n 3 build/asan/$$p --layers 3 --dim 31 --steps 3 --quiet --offload --check \
	    >build/asan/$$p-offload.log 2>&1 || { cat build/asan/$$p-offload.log; echo "test-asan: $$p --offload failed"; exit 1; }; \
	done
	@echo "test-asan: stage2, stage3 --offload at N = 3 clean under ASan + UBSan"

test-zerocalc: build/tests/test_zerocalc build/zerocalc
	$(CRITERION) build/tests/test_zerocalc -j2

test-integration: $(INTEGRATION_TESTS) $(CPU_BINS) build/zlckpt
	@ZL_BUILD=build/cpu ZL_MPIEXEC="$(MPIEXEC)" ZL_MAX_WORLD=9 tests/run-criterion.sh build/tests/test_integration -j1
	@ZL_BUILD=build/cpu ZL_MPIEXEC="$(MPIEXEC)" tests/run-criterion.sh build/tests/test_gpt_integration -j1
	@ZL_BUILD=build/cpu ZL_MPIEXEC="$(MPIEXEC)" tests/run-criterion.sh build/tests/test_loud -j1
	@ZL_BUILD=build/cpu ZL_MPIEXEC="$(MPIEXEC)" tests/run-criterion.sh build/tests/test_mixed -j1
	@ZL_BUILD=build/cpu ZL_MPIEXEC="$(MPIEXEC)" tests/run-criterion.sh build/tests/test_ckpt -j1
	@ZL_BUILD=build/cpu ZL_MPIEXEC="$(MPIEXEC)" tests/run-criterion.sh build/tests/test_report -j1
	@ZL_BUILD=build/cpu ZL_MPIEXEC="$(MPIEXEC)" tests/run-criterion.sh build/tests/test_offload -j1

# Shell scripts parse and pass shellcheck (if installed); run-criterion.sh fails a run of no test;
# mpi-kind.sh tells the launchers apart; the Slurm body runs in a pretend allocation;
# scripts/gpu-table2.sh runs on a pretend device (ZL_CPU_DEVICE_BYTES); scripts/test-gpu.sh on
# pretend GPUs.
test-scripts: $(CPU_BINS) build/zerocalc build/zlbatch build/bench_host_adam build/tests/test_unit
	python3 bench/nvml_clocks.py
	build/bench_host_adam --help >build/help.txt && grep -q '^usage: ' build/help.txt  # exit 0, the usage on stdout
	build/bench_host_adam --no-such-flag 2>/dev/null; test $$? -eq 2  # a bad flag: exit 2 (not a crash)
	! tests/run-criterion.sh build/tests/test_unit --filter 'no-such-suite/*' >/dev/null 2>&1  # a run of no test fails
	test "$$(scripts/mpi-kind.sh $(MPIEXEC))" != other  # the launcher the tests use is recognised
	test "$$(scripts/mpi-kind.sh echo 'mpiexec (OpenRTE) 4.1.6')" = openmpi
	test "$$(scripts/mpi-kind.sh echo 'mpiexec (Open MPI) 5.0.3')" = openmpi
	test "$$(scripts/mpi-kind.sh echo 'HYDRA build details:')" = mpich
	tests/test-zlbatch.sh
	tests/test-stage-files.sh
	tests/test-slurm.sh
	tests/test-table2.sh
	tests/test-gpu-script.sh
	tests/test-bench-script.sh

# Sources are cited by short title (docs/references.md): no source numbers or machine paths.
test-words:
	tests/test-words.sh

test-gpu: cpu cuda $(addprefix build/tests/,test_integration test_loud test_report test_gpt_integration test_offload test_mixed test_ckpt)
	scripts/test-gpu.sh

# --model gpt against a PyTorch rebuild of it (tests/gpu/torch_gpt_reference.py): step 1's loss
# and gradient norm; needs a Python with PyTorch (PYTHON=..., default python3). Not in `make test`.
test-gpt-reference: cpu
	ZL_MPIEXEC="$(MPIEXEC)" tests/gpu/gpt-reference.sh build/cpu 2

# Execute every notebook (installs Jupyter from Debian's packages if missing); figures -> docs/img/.
notebooks: cpu
	scripts/run-notebooks.sh

results-cpu: deps-run cpu
	scripts/results-cpu.sh

GPUS = $(shell scripts/gpu-count.sh) # CUDA_VISIBLE_DEVICES's entries, else what nvidia-smi -L lists
demo: deps-run
	@if [ "$(GPUS)" -gt 0 ] 2>/dev/null && [ -n "$(HAVE_NVCC)" ]; then \
	  $(MAKE) cuda && scripts/demo.sh cuda $(GPUS); \
	else \
	  $(MAKE) cpu && scripts/demo.sh cpu 4; \
	fi

clean:
	rm -rf build
