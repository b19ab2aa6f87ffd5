# The map of the project: `make help` lists every target.
#
# CPU programs build with gcc, -march=native (CI builds on the machine that runs them)
# and OpenMP. CUDA programs build with nvcc when it is on the PATH.
#   make BLAS=1 ...        use OpenBLAS for the CPU trainer's matmuls
#   make PRECISION=FP32    GPU build precision: BF16 (default), FP16 or FP32
#   make GPU_ARCH=86       the GPUs the CUDA programs are built for. Default: this machine's
#                          first GPU (nvidia-smi: 9.0 -> 90a, Hopper with wgmma; 8.9 -> 89;
#                          8.6 -> 86; 8.0 -> 80; a newer one its own number), and with no GPU
#                          here all: sm_80, sm_86, sm_89 and sm_90a in one binary, plus PTX
#                          that the driver compiles for newer GPUs. Or 90a, 90, 89, 86, 80 by
#                          hand; 90 leaves out the wgmma kernels. Below 8.0 is refused.
#                          ptx: compute_80 PTX alone, which the driver compiles for the GPU it
#                          runs on: with GPT2_TEST_GPU_CAP, how a newer GPU runs the code an
#                          A100 or an RTX card runs (scripts/gpu_check.sh section 13).

CC ?= gcc
CFLAGS ?= -O3 -march=native
# -fno-math-errno lets gcc vectorise sqrtf (AdamW); results are unchanged
CFLAGS += -std=c11 -Wall -Wextra -fno-math-errno -fopenmp -I.
# the commit a program was built from, recorded in each run's metrics.jsonl
GIT_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
CFLAGS += -DGIT_COMMIT=\"$(GIT_COMMIT)\"
LDLIBS = -lm
SAN_FLAGS = -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
ifeq ($(BLAS),1)
  CFLAGS += -DUSE_CBLAS
  LDLIBS += -lopenblas
endif

NVCC ?= nvcc
PRECISION ?= BF16
# GPU_ARCH (see above). The variables below are expanded only by the recipes that run nvcc,
# so that nvidia-smi runs, at most once, only for a make that builds GPU code.
comma := ,
GPU_ARCHS_ALL = 80 86 89 90a
# this machine's first GPU as "<capability>, <name>" ("9.0, NVIDIA H100 80GB HBM3"); empty
# without one, or where nvidia-smi is too old to name the capability (then as without a GPU)
GPU_SMI = nvidia-smi --query-gpu=compute_cap,name --format=csv,noheader 2>/dev/null | \
          sed -n '1{/^ *[0-9][0-9]*\.[0-9][0-9]*$(comma)/p;}'
GPU_HERE = $(eval GPU_HERE := $$(shell $$(GPU_SMI)))$(GPU_HERE)
GPU_HERE_CC = $(subst $(comma),,$(firstword $(GPU_HERE)))
GPU_HERE_NAME = $(wordlist 2,$(words $(GPU_HERE)),$(GPU_HERE))
GPU_HERE_ARCH = $(if $(shell [ $(subst .,,$(GPU_HERE_CC)) -ge 80 ] && echo ok),\
                  $(if $(filter 9.0,$(GPU_HERE_CC)),90a,$(subst .,,$(GPU_HERE_CC))),\
                  $(error this machine's GPU ($(GPU_HERE_NAME)) is compute capability $(GPU_HERE_CC): the GPU \
                    programs need 8.0 (A100) or newer; make GPU_ARCH=all builds them for the GPUs they support))
GPU_ARCH ?= $(if $(GPU_HERE),$(strip $(GPU_HERE_ARCH)),all)
# sm_90a runs everything sm_90 would
GPU_ARCH_LIST = $(if $(filter 90a,$(GPU_ARCH_ALL_LIST)),$(filter-out 90,$(GPU_ARCH_ALL_LIST)),$(GPU_ARCH_ALL_LIST))
GPU_ARCH_ALL_LIST = $(if $(filter all,$(GPU_ARCH)),$(GPU_ARCHS_ALL),$(filter-out ptx,$(GPU_ARCH)))
# the values of GPU_ARCH that are not a compute capability of 8.0 or newer (80, 86, 90a, 100f, ...)
GPU_ARCH_BAD = $(shell for a in $(GPU_ARCH_LIST); do n=$${a%[af]}; case $$n in (''|*[!0-9]*) echo $$a;; \
                 (*) [ $$n -ge 80 ] || echo $$a;; esac; done)
GPU_GENCODE = $(if $(GPU_ARCH_BAD),$(error GPU_ARCH=$(GPU_ARCH): $(GPU_ARCH_BAD) is not a compute capability of 8.0 \
                (A100) or newer; use all$(comma) 90a$(comma) 90$(comma) 89$(comma) 86$(comma) 80$(comma) ptx or a newer one)) \
              $(foreach a,$(GPU_ARCH_LIST),-gencode arch=compute_$(a)$(comma)code=sm_$(a)) \
              $(if $(filter all ptx,$(GPU_ARCH)),-gencode arch=compute_80$(comma)code=compute_80)
# FLASH_WGMMA=1: the build includes sm_90a, whose wgmma flash attention (kernels/attention_sm90.cuh)
# runs where the GPU is compute capability 9.0; every other GPU runs the mma.sync kernels
FLASH_WGMMA = $(if $(filter 90a,$(GPU_ARCH_LIST)),1,0)
# several architectures: their device passes in parallel (train_gpt2cu for all on 2 cores: 29 s, not 37)
NVCC_ARCH_FLAGS = -O3 -std=c++17 $(strip $(GPU_GENCODE)) $(if $(word 2,$(GPU_ARCH_LIST)),--threads 0) \
                  -DFLASH_WGMMA=$(FLASH_WGMMA) -I.
# OpenMP on the host side: the random initialisation fills its chunks in parallel (common/rng.h)
NVCC_FLAGS = $(NVCC_ARCH_FLAGS) -DPRECISION=$(PRECISION) -DGIT_COMMIT=\"$(GIT_COMMIT)\" -Xcompiler -fopenmp
NVCC_LIBS = -lcublas -lcublasLt -lnccl -ldl -lgomp
HAVE_NVCC := $(shell command -v $(NVCC) 2>/dev/null)
MPICC ?= mpicc
HAVE_MPI := $(shell command -v $(MPICC) 2>/dev/null)
# MPI for nvcc: its C API only (OMPI_SKIP_MPICXX), and nvcc takes neither gcc's -Wl,a,b nor -pthread as they are
NVCC_MPI_FIX = sed -e 's/-Wl,/-Xlinker /g' -e 's/-pthread/-Xcompiler -pthread/g'
NVCC_MPI_COMPILE = $(shell $(MPICC) --showme:compile | $(NVCC_MPI_FIX))
NVCC_MPI_LINK = $(shell $(MPICC) --showme:link | $(NVCC_MPI_FIX))
# the GPU trainer takes its ranks from mpirun when built with MPI (else from the environment)
NVCC_MPI = $(if $(HAVE_MPI),-DUSE_MPI -DOMPI_SKIP_MPICXX $(NVCC_MPI_COMPILE))
NVCC_MPI_LIBS = $(if $(HAVE_MPI),$(NVCC_MPI_LINK))

# the python that has PyTorch (Debian's python3-torch lives under /usr/bin/python3)
PYTHON_TORCH ?= $(shell for p in python3 /usr/bin/python3; do \
                    $$p -c 'import torch' 2>/dev/null && echo $$p && break; done)
# the python that has tiktoken (pip installs for the python3 on PATH)
PYTHON ?= python3

COMMON_H = $(wildcard common/*.h)
# the GPU trainer's host code, plain C that the unit tests compile with gcc
GPU_HOST_H = $(wildcard gpu/host/*.h)
KERNELS_H = $(wildcard kernels/*.cuh)
# the GPU trainer's modules (settings, model, optimizer, ...)
GPU_H = $(wildcard gpu/*.cuh) $(GPU_HOST_H)
COMM_CUH = kernels/comm.cuh kernels/common.cuh
ATTN_CUH = kernels/attention.cuh kernels/attention_plain.cuh kernels/attention_mma.cuh kernels/attention_sm90.cuh \
           kernels/attention_sm90_ws.cuh $(MATMUL_CUH)
# the flash kernels only the tests run
ATTN_VARIANTS_H = dev/test/attention_variants.cuh
MATMUL_CUH = kernels/matmul.cuh kernels/common.cuh
CBLAS_H = $(wildcard /usr/include/x86_64-linux-gnu/cblas.h /usr/include/cblas.h)

.PHONY: help all cpu cuda cuda-FP32 cuda-FP16 cuda-BF16 cuda-ptx quickstart data test test-run test-d12 \
        bench-sgemm bench-tokenizer bench-cpu clean

help:  ## list the targets
	@grep -E '^[a-zA-Z0-9_%/-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | \
	    awk -F'\t' '{printf "  %-18s %s\n", $$1, $$2}'

all: cpu $(if $(HAVE_NVCC),cuda)  ## build everything this machine can build

cpu: train_gpt2 test_gpt2 prepro build/tokenize build/export_hf  ## build the CPU programs

# only what scripts/quickstart.sh runs (it runs the data step itself, and builds train_gpt2cu where a GPU is)
quickstart: train_gpt2 prepro  ## the main job: prepare Tiny Shakespeare, train (GPU if present, else CPU), sample
	./scripts/quickstart.sh

data: prepro  ## tokenize Tiny Shakespeare into data/tinyshakespeare/*.bin
	./dev/data/tinyshakespeare.sh

train_gpt2: train_gpt2.c $(COMMON_H)  ## CPU fp32 trainer
	$(CC) $(CFLAGS) -o $@ train_gpt2.c $(LDLIBS)

test_gpt2: test_gpt2.c train_gpt2.c $(COMMON_H)  ## CPU trainer vs the PyTorch reference
	$(CC) $(CFLAGS) -o $@ test_gpt2.c $(LDLIBS)

build/train_gpt2_blas: train_gpt2.c $(COMMON_H)  ## the CPU trainer with OpenBLAS matmuls (for comparison)
	@mkdir -p build
	$(CC) $(CFLAGS) -DUSE_CBLAS -o $@ train_gpt2.c $(LDLIBS) -lopenblas

prepro: dev/data/prepro.c $(COMMON_H)  ## text/JSONL to token shards
	$(CC) $(CFLAGS) -o $@ dev/data/prepro.c $(LDLIBS)

build/tokenize: dev/tokenize.c $(COMMON_H)  ## tokenizer CLI: encode, decode, benchmark
	@mkdir -p build
	$(CC) $(CFLAGS) -o $@ dev/tokenize.c $(LDLIBS)

build/export_hf: dev/export_hf.c $(COMMON_H)  ## checkpoint <-> Hugging Face transformers GPT-2 directory
	@mkdir -p build
	$(CC) $(CFLAGS) -o $@ dev/export_hf.c $(LDLIBS)

# unit tests, built with AddressSanitizer and UBSan
# the fuzzer runs prepro's own main() in-process
build/san/fuzz_readers: dev/data/prepro.c dev/test/testutil.h
# its command-line cases run the program as built
build/san/test_export_hf: build/export_hf
build/san/%: dev/test/%.c $(COMMON_H) $(GPU_HOST_H) dev/test/testutil.h
	@mkdir -p build/san
	$(CC) -std=c11 -Wall -Wextra -I. -fopenmp -pthread $(SAN_FLAGS) -o $@ $< $(LDLIBS)

# the data loader's thread under ThreadSanitizer (the loader tests' races, if any)
build/tsan/test_dataloader: dev/test/test_dataloader.c $(COMMON_H) dev/test/testutil.h
	@mkdir -p build/tsan
	$(CC) -std=c11 -Wall -Wextra -I. -pthread -O1 -g -fsanitize=thread -o $@ $< $(LDLIBS)

build/san/test_gpt2: test_gpt2.c train_gpt2.c $(COMMON_H)
	@mkdir -p build/san
	$(CC) -std=c11 -Wall -Wextra -fno-math-errno -I. -fopenmp $(SAN_FLAGS) -o $@ test_gpt2.c $(LDLIBS)

# the energy reader against a fake NVML (the driver's library is absent on CPU machines)
build/fake_nvml/libnvidia-ml.so.1: dev/test/fake_nvml.c
	@mkdir -p build/fake_nvml
	$(CC) -std=c11 -Wall -Wextra -shared -fPIC -o $@ $<

# the file-system fault shim of dev/test/fault_inject.py, loaded into the trainer with LD_PRELOAD
build/libfault_shim.so: dev/test/fault_shim.c  ## the file-system fault shim of dev/test/fault_inject.py (LD_PRELOAD)
	@mkdir -p build
	$(CC) -std=c11 -Wall -Wextra -O2 -shared -fPIC -o $@ $< -ldl

build/san/test_energy: dev/test/test_energy.c gpu/host/energy.h $(COMMON_H) build/fake_nvml/libnvidia-ml.so.1
	@mkdir -p build/san
	$(CC) -std=c11 -Wall -Wextra -I. $(SAN_FLAGS) -o $@ $< $(LDLIBS) -ldl

build/test_sgemm: dev/test/test_sgemm.c common/sgemm.h
	@mkdir -p build
	$(CC) $(CFLAGS) -o $@ dev/test/test_sgemm.c $(LDLIBS)

build/bench_sgemm: dev/bench_sgemm.c common/sgemm.h
	@mkdir -p build
	$(CC) $(CFLAGS) -o $@ dev/bench_sgemm.c $(LDLIBS) $(if $(CBLAS_H),-DHAVE_CBLAS -lopenblas)

build/test_distributed: dev/test/test_distributed.c $(COMMON_H)  ## multi-process logic under mpirun (ZeRO, batch split)
	@mkdir -p build
	$(MPICC) -std=c11 -O2 -Wall -Wextra -DUSE_MPI -I. -o $@ dev/test/test_distributed.c -lm

# What a folder's CUDA programs were compiled for: build/nvcc_flags for those of the tree's
# root and of build/ (GPU code and precision), build/cuda_<P>/nvcc_flags for a precision's
# folder (GPU code). Rewritten only when it changes, and then newer than every program
# depending on it: a build for another GPU_ARCH or PRECISION is rebuilt, never reused.
build/nvcc_flags: FORCE
	@mkdir -p $(@D)
	@echo '$(NVCC_ARCH_FLAGS) -DPRECISION=$(PRECISION)' | cmp -s - $@ || \
	    echo '$(NVCC_ARCH_FLAGS) -DPRECISION=$(PRECISION)' > $@
build/cuda_%/nvcc_flags: FORCE
	@mkdir -p $(@D)
	@echo '$(NVCC_ARCH_FLAGS)' | cmp -s - $@ || echo '$(NVCC_ARCH_FLAGS)' > $@
.PRECIOUS: build/cuda_%/nvcc_flags
# (no rule and no file: always out of date, so the two rules above always run)
FORCE:

build/test_comm: dev/test/test_comm.cu $(COMM_CUH) $(COMMON_H) build/nvcc_flags  ## GPU collectives (NCCL, MPI) vs a host reference (GPU)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) -DUSE_MPI -DOMPI_SKIP_MPICXX $(NVCC_MPI_COMPILE) -o $@ dev/test/test_comm.cu \
	    $(NVCC_LIBS) $(NVCC_MPI_LINK)

build/test_nccl_id_file: dev/test/test_nccl_id_file.cu $(COMM_CUH) $(COMMON_H) build/nvcc_flags  ## NCCL id file exchange (no GPU needed)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/test/test_nccl_id_file.cu $(NVCC_LIBS)

FP8_CUH = kernels/fp8.cuh common/fp8.h $(MATMUL_CUH) kernels/gelu.cuh
build/test_fp8_host: dev/test/test_fp8_host.cu $(FP8_CUH) dev/test/testutil.h build/nvcc_flags  ## FP8 encoder vs CUDA's (no GPU needed)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/test/test_fp8_host.cu $(NVCC_LIBS)

build/test_model_alone: dev/test/test_model_alone.cu $(GPU_H) $(KERNELS_H) common/checkpoint.h dev/test/testutil.h build/nvcc_flags  ## gpu/model.cuh alone: no settings or run machinery, its layout (no GPU needed)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/test/test_model_alone.cu $(NVCC_LIBS)

UNIT_TESTS = build/san/test_gpt2 build/test_distributed build/san/test_tokenizer_unit build/san/test_dataloader \
             build/san/test_checkpoint build/san/test_sgemm build/san/test_energy build/san/fuzz_readers \
             build/san/test_loss_scaler build/san/test_export_hf build/san/test_sampling \
             build/san/test_hellaswag build/san/test_memory_budget build/tsan/test_dataloader \
             build/san/test_update_pieces build/san/test_step_rules build/san/test_rng build/san/test_run_dir

# The dependencies come first, before anything is built (mpicc builds a unit test), and the
# tests run in a sub-make so that HAVE_MPI, PYTHON_TORCH, ... see what was just installed.
test:  ## run every test (the README's test command); first installs missing dependencies (as root)
	PYTHON=$(PYTHON) MPICC=$(MPICC) ./scripts/install_deps.sh --ensure
	@$(MAKE) --no-print-directory test-run

# ./train_gpt2cu is the BF16 build (for GPU_ARCH: all on a machine without a GPU) whose
# command line test_train_cli.sh checks; run_all.sh compiles every CUDA program in every
# precision for sm_90a, and in bf16 for every GPU (cuda-FP32, ...), as tests of their own
TEST_PREREQS = cpu $(UNIT_TESTS) build/test_sgemm $(if $(HAVE_NVCC),train_gpt2cu build/test_nccl_id_file)
TEST_PREREQS += $(if $(HAVE_NVCC),build/test_fp8_host build/test_model_alone) build/libfault_shim.so
test-run: $(TEST_PREREQS)  ## make test without the dependency check
	HAVE_NVCC=$(if $(HAVE_NVCC),1,0) PYTHON=$(PYTHON) PYTHON_TORCH=$(PYTHON_TORCH) ./dev/test/run_all.sh

test-d12: test_gpt2  ## CPU trainer vs the reference at the GPT-2 124M shape (B=4, T=64; ~1 min)
	$(PYTHON_TORCH) dev/gpt2_ref.py --model d12 --batch 4 --seq-len 64 --out-dir build/ref_d12
	./test_gpt2 --ref-dir build/ref_d12

bench-sgemm: build/bench_sgemm  ## GFLOP/s of the CPU matmul at GPT-2 shapes
	./build/bench_sgemm

bench-tokenizer: build/tokenize data  ## our tokenizer's MB/s beside tiktoken's
	$(PYTHON) dev/bench_tokenizer.py

bench-cpu: train_gpt2 data  ## CPU trainer step time at d12, B=4, T=64
	./scripts/bench_cpu.sh

# the attention tests have no FP32 build
ATTN_TESTS = test_attention test_wgmma
CUDA_TESTS = $(if $(filter FP32,$(PRECISION)),,$(addprefix build/,$(ATTN_TESTS)))
# the FP8 test too (its fp16 build says it needs bf16, and exits 77)
CUDA_TESTS += $(if $(filter FP32,$(PRECISION)),,build/test_fp8)
# generation's linear layers and token sampling, in every precision
CUDA_TESTS += build/test_decode build/test_sample
cuda: train_gpt2cu test_gpt2cu $(CUDA_TESTS)  ## build the GPU trainer and its tests (nvcc) for this machine's GPU (GPU_ARCH)

train_gpt2cu: train_gpt2.cu $(GPU_H) $(KERNELS_H) $(COMMON_H) build/nvcc_flags  ## GPU trainer (one GPU, or several with mpirun / NCCL)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_MPI) -o $@ train_gpt2.cu $(NVCC_LIBS) $(NVCC_MPI_LIBS)

test_gpt2cu: test_gpt2.cu $(GPU_H) $(KERNELS_H) $(COMMON_H) build/nvcc_flags  ## GPU trainer vs the PyTorch reference
	$(NVCC) $(NVCC_FLAGS) $(NVCC_MPI) -o $@ test_gpt2.cu $(NVCC_LIBS) $(NVCC_MPI_LIBS)

# Every CUDA program in one precision, in a folder of its own, for GPU_ARCH (the folder's
# nvcc_flags file rebuilds it for another): make test compiles all three so that a GPU build
# broken in any precision, or for any GPU, fails it (the GPU itself is not needed).
cuda-FP32: $(addprefix build/cuda_FP32/,train_gpt2cu test_gpt2cu test_decode test_sample)  ## every CUDA program in FP32, into build/cuda_FP32/
cuda-FP16: $(addprefix build/cuda_FP16/,train_gpt2cu test_gpt2cu test_decode $(ATTN_TESTS) test_sample)  ## the same, FP16
cuda-BF16: $(addprefix build/cuda_BF16/,train_gpt2cu test_gpt2cu test_decode $(ATTN_TESTS) test_sample)  ## the same, BF16
# build/cuda_<P>-ptx/: the same programs as compute_80 PTX alone (GPU_ARCH=ptx), for running
# on a newer GPU the code that A100s and RTX cards run (scripts/gpu_check.sh section 13)
$(foreach p,FP32 FP16 BF16,$(eval build/cuda_$(p)-ptx/%: GPU_ARCH = ptx))
cuda-ptx: $(foreach p,FP32 FP16 BF16,build/cuda_$(p)-ptx/train_gpt2cu build/cuda_$(p)-ptx/test_gpt2cu)  ## the trainer and its test in each precision as compute_80 PTX alone, into build/cuda_<P>-ptx/
cuda-ptx: $(addprefix build/cuda_BF16-ptx/,$(ATTN_TESTS)) $(addprefix build/cuda_FP16-ptx/,$(ATTN_TESTS))

build/cuda_%/train_gpt2cu: train_gpt2.cu $(GPU_H) $(KERNELS_H) $(COMMON_H) build/cuda_%/nvcc_flags
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_ARCH_FLAGS) -DPRECISION=$(firstword $(subst -, ,$*)) $(NVCC_MPI) -o $@ train_gpt2.cu $(NVCC_LIBS) $(NVCC_MPI_LIBS)

build/cuda_%/test_gpt2cu: test_gpt2.cu $(GPU_H) $(KERNELS_H) $(COMMON_H) build/cuda_%/nvcc_flags
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_ARCH_FLAGS) -DPRECISION=$(firstword $(subst -, ,$*)) $(NVCC_MPI) -o $@ test_gpt2.cu $(NVCC_LIBS) $(NVCC_MPI_LIBS)

build/cuda_%/test_attention: dev/test/test_attention.cu $(ATTN_CUH) $(ATTN_VARIANTS_H) gpu/host/energy.h build/cuda_%/nvcc_flags
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_ARCH_FLAGS) -DPRECISION=$(firstword $(subst -, ,$*)) -o $@ dev/test/test_attention.cu $(NVCC_LIBS)

build/cuda_%/test_wgmma: dev/test/test_wgmma.cu $(ATTN_CUH) build/cuda_%/nvcc_flags
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_ARCH_FLAGS) -DPRECISION=$(firstword $(subst -, ,$*)) -o $@ dev/test/test_wgmma.cu $(NVCC_LIBS)

cuda-FP16: build/cuda_FP16/test_fp8
cuda-BF16: build/cuda_BF16/test_fp8
build/cuda_%/test_fp8: dev/test/test_fp8.cu $(FP8_CUH) dev/test/gpu_testutil.cuh build/cuda_%/nvcc_flags
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_ARCH_FLAGS) -DPRECISION=$(firstword $(subst -, ,$*)) -o $@ dev/test/test_fp8.cu $(NVCC_LIBS)

DECODE_CUH = dev/test/gpu_testutil.cuh kernels/decode_linear.cuh kernels/pdl.cuh kernels/layernorm.cuh kernels/gelu.cuh $(MATMUL_CUH)
build/cuda_%/test_decode: dev/test/test_decode.cu $(DECODE_CUH) build/cuda_%/nvcc_flags
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_ARCH_FLAGS) -DPRECISION=$(firstword $(subst -, ,$*)) -o $@ dev/test/test_decode.cu $(NVCC_LIBS)

build/test_decode: dev/test/test_decode.cu $(DECODE_CUH) build/nvcc_flags  ## generation's linear layers (kernels/decode_linear.cuh) vs the CPU; --bench: GB/s vs cuBLAS (GPU)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/test/test_decode.cu $(NVCC_LIBS)

SAMPLE_CUH = dev/test/gpu_testutil.cuh kernels/sample.cuh kernels/common.cuh common/rng.h common/sampling.h
build/cuda_%/test_sample: dev/test/test_sample.cu $(SAMPLE_CUH) $(COMMON_H) build/cuda_%/nvcc_flags
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_ARCH_FLAGS) -DPRECISION=$(firstword $(subst -, ,$*)) -o $@ dev/test/test_sample.cu $(NVCC_LIBS)

build/test_sample: dev/test/test_sample.cu $(SAMPLE_CUH) $(COMMON_H) build/nvcc_flags  ## token sampling on the GPU vs common/sampling.h's (GPU; --bench: microseconds a call)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/test/test_sample.cu $(NVCC_LIBS)

build/test_attention: dev/test/test_attention.cu $(ATTN_CUH) $(ATTN_VARIANTS_H) gpu/host/energy.h build/nvcc_flags  ## flash attention vs fp32 (GPU)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/test/test_attention.cu $(NVCC_LIBS)

build/test_wgmma: dev/test/test_wgmma.cu $(ATTN_CUH) build/nvcc_flags  ## wgmma building blocks vs a CPU product (GPU 9.0)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/test/test_wgmma.cu $(NVCC_LIBS)

build/test_fp8: dev/test/test_fp8.cu $(FP8_CUH) dev/test/gpu_testutil.cuh build/nvcc_flags  ## FP8 casts and cuBLASLt matmul vs the CPU (GPU >= 8.9, bf16)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/test/test_fp8.cu $(NVCC_LIBS)

build/bench_matmul: dev/bench_matmul.cu $(MATMUL_CUH) gpu/host/energy.h build/nvcc_flags  ## cuBLASLt algorithms, step shapes (GPU)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/bench_matmul.cu $(NVCC_LIBS)

build/bench_fp8: kernels/fp8_linear.cuh gpu/host/energy.h
build/bench_fp8: dev/bench_fp8.cu $(FP8_CUH) build/nvcc_flags  ## FP8 vs bf16, each matmul of a step: ms, J, floor (GPU 9.0, bf16)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/bench_fp8.cu $(NVCC_LIBS)

clean:  ## remove build outputs (keeps data/)
	rm -rf build train_gpt2 test_gpt2 prepro train_gpt2cu test_gpt2cu
