#!/bin/bash
# stop 26 call 4 (4 GPUs): make test-gpu's integration (MLP, --offload among them) and loud parts
# with N up to 4 (MAX_WORLD=4): N = 3 and 4 on GPUs for the first time (issue 16's test-gpu, partly)
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/e4; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L | tee $R/machine.txt
MPIEXEC=mpirun MAX_WORLD=4 PARTS="integration" timeout 430 scripts/test-gpu.sh > $R/integration.txt 2>&1; echo "integration rc=$? at $((SECONDS-T0)) s" | tee -a $S
grep -E "Synthesis|FAIL|ALL PASSED|checks failed" $R/integration.txt | tail -5 | tee -a $S
MPIEXEC=mpirun MAX_WORLD=4 PARTS="loud" timeout $((540-SECONDS+T0)) scripts/test-gpu.sh > $R/loud.txt 2>&1; echo "loud rc=$? at $((SECONDS-T0)) s" | tee -a $S
grep -E "Synthesis|FAIL|ALL PASSED|checks failed" $R/loud.txt | tail -5 | tee -a $S
