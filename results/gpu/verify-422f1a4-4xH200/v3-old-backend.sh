source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cp lease/backend_cuda_422f1a4.c kernels/cuda/backend_cuda.c
t=$SECONDS; make -j32 MPICC=mpicc GIT_COMMIT=422f1a4-backend cuda > /tmp/m.log 2>&1 || tail /tmp/m.log; echo "rebuilt with 422f1a4's backend_cuda.c in $((SECONDS-t)) s"
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_MAX_WORLD=2 ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
CUDA_VISIBLE_DEVICES=0,1 timeout 60 build/gpu-tests/test_report -j1 --filter '*/allgather_engine_stage2_without*' 2>&1 | tee $OUT/old.txt | grep -v "^\s*$" | tail -8
