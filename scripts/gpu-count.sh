#!/bin/sh
# gpu-count.sh — how many GPUs this process may use: the entries of CUDA_VISIBLE_DEVICES when it
# is set (a user's choice, or Slurm's on a node that does not hide the other GPUs), else what
# `nvidia-smi -L` lists. nvidia-smi lists every GPU of the machine whatever CUDA_VISIBLE_DEVICES
# says, so counting its lines alone launched more ranks than devices (each then refused, exit 2).
# Prints one number (0 without nvidia-smi). Used by the Makefile's demo and the GPU scripts.
if [ "${CUDA_VISIBLE_DEVICES+set}" = set ]; then
    # "2,3", "GPU-…,GPU-…", "MIG-…": one device an entry; "" or "-1" (no device) count 0
    printf '%s\n' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c -v -E '^[[:space:]]*(-1)?[[:space:]]*$' || true
else
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU') || true
    echo "${n:-0}"
fi
