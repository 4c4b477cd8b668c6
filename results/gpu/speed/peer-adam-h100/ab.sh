#!/bin/bash
# stop 35 call 9 (1 GPU): the DDP peer's master AdamW before (cast, unscale, fused Adam, copy: ~48 B a
# parameter) and after (the fused kernel unscales: ~40 B), lab-1b at N = 1, 12 steps, twice each, ABBA.
export NCCL_NVLS_ENABLE=0
nvidia-smi -L | head -1 | tee $OUT/ab.log
for v in old new new old; do
    f=bench/torch_peer.py; [ $v = old ] && f=bench/torch_peer_old_ab.py
    timeout 90 python3 -m torch.distributed.run --standalone --nproc_per_node 1 $f --stage 0 --preset lab-1b \
        --steps 12 2>&1 | grep -E "^peer:|Error|error" | sed "s/^/$v /" | tee -a $OUT/ab.log
done
