#!/usr/bin/env bash
# run_gpt2_multinode.sh: the same training across several nodes of 8 GPUs, with an
# Open MPI hostfile. The nodes need the repository, the data and the run directory at
# the same path (a shared file system: every rank reads its part of each batch, and
# under ZeRO every rank writes its own state file next to rank 0's).
#   HOSTFILE=hosts.txt NODES=4 scripts/run_gpt2_multinode.sh
#   HOSTFILE=hosts.txt NODES=8 MODEL=1558M scripts/run_gpt2_multinode.sh
# With ZeRO (-z 1 below) the number of ranks must divide the channels: 768 (124M) and
# 1600 (1558M) both split over 2, 4, 8, 16, 32 or 64 ranks; train_gpt2cu refuses others.
# hosts.txt holds one line per node: "node17 slots=8".
# Without MPI (e.g. a scheduler that starts every process itself): set RANK, WORLD_SIZE
# and LOCAL_RANK per process and GPT2_NCCL_ID_FILE to one path on the shared file system
# (rank 0 writes the NCCL id there, the others wait for it; use a fresh path per launch).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${HOSTFILE:?set HOSTFILE to an Open MPI hostfile}"
NODES=${NODES:-2}
GPUS=${GPUS:-8}
MODEL=${MODEL:-124M}
NP=$((NODES * GPUS))
make -s train_gpt2cu
case "$MODEL" in
  124M)  B=64; MIN_TOTAL=524288;  ARGS=(-e d12 -r 0 -z 1 -l 6e-4 -u 700 -q 0.0 -x 19073) ;;
  1558M) B=16; MIN_TOTAL=1048576; ARGS=(-e d48 -r 1 -z 1 -l 2e-4 -u 700 -q 0.1 -x 32000) ;;
  *) echo "MODEL must be 124M or 1558M" >&2; exit 1 ;;
esac
# -d must be a multiple of B*T*NP: the default is the larger of the model's usual batch
# and one micro-batch per rank (64 ranks x 64 x 1024 = 4M tokens for 124M; TOTAL= to
# override). --map-by ppr:8:node: 8 ranks per node, so the local rank picks the GPU.
# NCCL_IB_* / NCCL_SOCKET_IFNAME may be needed for your network.
TOTAL=${TOTAL:-$((B * 1024 * NP > MIN_TOTAL ? B * 1024 * NP : MIN_TOTAL))}
mpirun -np "$NP" --hostfile "$HOSTFILE" --map-by "ppr:$GPUS:node" --bind-to none \
    -x NCCL_NVLS_ENABLE=0 -x PATH -x LD_LIBRARY_PATH \
    ./train_gpt2cu "${ARGS[@]}" -b "$B" \
    -i "data/fineweb10B/fineweb_train_*.bin" -j "data/fineweb10B/fineweb_val_*.bin" \
    -o "log/gpt2_${MODEL}_${NP}gpu" -t 1024 -d "$TOTAL" -c 0.1 -k cosine \
    -v 250 -m 20 -s 5000 -g 144 -n 2000 -y "${RESUME:-0}"
