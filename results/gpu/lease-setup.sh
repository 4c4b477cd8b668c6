# lease-setup.sh — the set-up every device script under results/gpu/ sources as lease/setup.sh
# (kept here because lease/ is not in the repository): environment and build on a lent GPU
# machine that has nvcc, NCCL and Open MPI but no cJSON and cannot install packages.
# Before a call, on the build machine (Debian, `make deps` done):
#   mkdir -p lease .deps/include/cjson .deps/lib; cp results/gpu/lease-setup.sh lease/setup.sh
#   cp /usr/include/cjson/cJSON.h .deps/include/cjson/; cp /usr/include/xxhash.h .deps/include/
#   cp -L /usr/lib/x86_64-linux-gnu/libcjson.so.1 .deps/lib/; ln -sf libcjson.so.1 .deps/lib/libcjson.so
#   git rev-parse --short HEAD > lease/commit; make build/gpu-tests/test_<name> ...   # Criterion tests
# and carry .deps, lease and build/gpu-tests. The rest of this file is lease/setup.sh as used
# from 2026-11-27 (stop 32).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export CPATH=$PWD/.deps/include LIBRARY_PATH=$PWD/.deps/lib LD_LIBRARY_PATH=$PWD/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v mpicc >/dev/null && command -v mpirun >/dev/null || { echo "setup: no mpicc/mpirun on this machine"; return 1; }
_t=$SECONDS
make -j32 MPICC=mpicc GIT_COMMIT=$(cat lease/commit) cpu cuda > /tmp/make.log 2>&1 || { grep -E "error:|warning:" /tmp/make.log | head -30; tail -15 /tmp/make.log; return 1; }
[ -x build/cuda/stage3 ] || { echo "setup: no build/cuda/stage3 (nvcc or NCCL not found)"; return 1; }
echo "build: $((SECONDS-_t)) s, build/git-commit $(cat build/git-commit), HEAD $(cat lease/commit); $(mpirun --version | head -1); $(nvidia-smi -L | head -1 | cut -c1-60) x$(nvidia-smi -L | grep -c ^GPU)"
