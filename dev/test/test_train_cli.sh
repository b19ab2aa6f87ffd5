#!/usr/bin/env bash
# test_train_cli.sh: the CPU trainer's command line end to end: bad flags, values and
# files are refused with a message naming the flag or file (the GPU trainer's too, when
# built: it checks them before any GPU work); bad data is found at start; a short run
# trains (loss falls); a run resumed from a checkpoint repeats the uninterrupted run's
# losses bit for bit; resume after a crash (-y 1 with nothing yet, a corrupt newest
# checkpoint, a log written past the checkpoint, changed flags, a finished run); a run
# whose every update is skipped stops; a failing sample never costs the final checkpoint;
# -s 0 and -n 0 mean never (llm.c); the last step evaluates; -x -1 trains at least one step;
# metrics.jsonl ends with the run's summary record; -e naming a FIFO or a safetensors file is
# refused at once, saying what it is.
set -u
cd "$(dirname "$0")/../.."
./dev/data/tinyshakespeare.sh > /dev/null || { echo "data step failed"; exit 1; }
W=build/test_train_cli
rm -rf $W && mkdir -p $W
. dev/test/testlib.sh

SMALL="-e l2h2c32t32 -b 2 -t 16 -s 0 -g 4 -v 0"

# expect_error "description" "text the message must contain" args...
# Runs $TRAINER; the GPU trainer (if built) must refuse the same input before any GPU work.
expect_error() {
    local what=$1 needle=$2
    shift 2
    $TRAINER "$@" > $W/out.txt 2> $W/err.txt
    local st=$?
    if [ $st -eq 1 ] && grep -qF -- "$needle" $W/err.txt; then ok "$TRAINER: $what: $(head -c 150 $W/err.txt)"
    else bad "$TRAINER: $what (exit $st, stderr: $(cat $W/err.txt))"; fi
}
# first_line WHAT PREFIX: the first setting the last refusal named (the fastest by the
# planner's speed model) starts with PREFIX: the fastest measured in that budget (docs/memory.md)
first_line() {
    local got
    got=$(sed -n 2p $W/err.txt)
    if [[ "$got" == "$2"* ]]; then ok "$1: the fastest measured is named first: $got"
    else bad "$1: first line '$got', expected '$2...'"; fi
}
printf 'not a checkpoint' > $W/junk.bin
mkdir -p $W/a_dir $W/ro && chmod 555 $W/ro
# shards written by hand: (name, token ids) with the llm.c header
write_shard() {
    python3 -c 'import struct, sys
ids = [int(x) for x in sys.argv[2].split(",")] * int(sys.argv[3])
h = [20240520, 1, len(ids)] + [0] * 253
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(ids), *ids))' "$@"
}
write_shard $W/good_000.bin 1,2,3,4,5 400
write_shard $W/good_001.bin 1,2,3,4,5 400
write_shard $W/bad_000.bin 1,2,3,4,5 400
write_shard $W/bad_001.bin 1,2,3,60000,5 400
trainers=./train_gpt2
[ -x ./train_gpt2cu ] && trainers="$trainers ./train_gpt2cu"
for TRAINER in $trainers; do
    expect_error "negative batch size" "-b" $SMALL -b -1
    expect_error "T over max_seq_len" "exceeds" $SMALL -t 64
    expect_error "total batch not a multiple of B*T" "-d" $SMALL -d 100
    expect_error "missing training data" "no_such_dir" $SMALL -i 'no_such_dir/x_*.bin'
    expect_error "unknown descriptor/missing model" "d13" -e d13
    expect_error "unknown flag" "--bogus" --bogus 3
    expect_error "malformed number" "-x" $SMALL -x ten
    expect_error "unknown schedule" "-k" $SMALL -k sawtooth
    expect_error "resume without -o" "-y" $SMALL -y 1
    expect_error "corrupt checkpoint" "junk.bin" -e $W/junk.bin
    expect_error "a directory without a Hugging Face model" "no config.json" -e $W/a_dir
    for flag in -q -c --grad-clip --wsd-decay-fraction --temperature -l; do
        expect_error "$flag nan" "$flag" $SMALL $flag nan
        expect_error "$flag inf" "$flag" $SMALL $flag inf
    done
    expect_error "-q above 1" "-q" $SMALL -q 1.5
    expect_error "--grad-clip negative" "--grad-clip" $SMALL --grad-clip -1
    expect_error "--temperature 0" "--temperature" $SMALL --temperature 0
    expect_error "--top-k negative" "--top-k" $SMALL --top-k -1
    expect_error "--top-p 0" "--top-p" $SMALL --top-p 0
    expect_error "--top-p above 1" "--top-p" $SMALL --top-p 1.5
    expect_error "-b past int32 (no wrap to 1)" "-b" $SMALL -b 4294967297
    expect_error "-l past float's range" "-l" $SMALL -l 1e39
    expect_error "-u negative" "-u" $SMALL -u -1
    expect_error "--batch-size=abc" "--batch-size" $SMALL --batch-size=abc
    expect_error "-x -5 (only -1 means one epoch)" "-x" $SMALL -x -5
    expect_error "-x 0" "-x" $SMALL -x 0
    expect_error "-m -5 (only -1 means the whole split)" "-m" $SMALL -m -5
    expect_error "-m 0" "-m" $SMALL -m 0
    expect_error "a descriptor with spaces" "not a model descriptor" -e 'l 2h 2c 64'
    expect_error "--max-skipped-updates negative" "--max-skipped-updates" $SMALL --max-skipped-updates -1
    expect_error "--check-data 2" "--check-data" $SMALL --check-data 2
    if [ "$(id -u)" != 0 ]; then  # root writes anywhere: this check needs another user
        expect_error "-o that cannot be created says why" "Permission denied" $SMALL -o $W/ro/run
    fi
    expect_error "-o under a file says why" "Not a directory" $SMALL -o $W/junk.bin/run
    expect_error "a bad token id in the second train shard, found at start" "bad_001.bin" $SMALL -x 1 \
        -i "$W/bad_*.bin" -j "$W/good_*.bin"
    expect_error "a bad token id in a validation shard, found at start" "bad_001.bin" $SMALL -v 1 -x 1 \
        -i "$W/good_*.bin" -j "$W/bad_*.bin" --check-data 0
done
# the run's last step evaluates even off the -v period; -x -1 with a -d longer than one epoch
# trains one step, not none
./train_gpt2 $SMALL -v 4 -m 1 -x 6 -i "$W/good_*.bin" -j "$W/good_*.bin" > $W/lastval.txt 2>&1
if grep -q "^val loss .* (step 4)" $W/lastval.txt && grep -q "^val loss .* (step 6)" $W/lastval.txt; then
    ok "-v 4 -x 6 evaluates at steps 4 and 6 (the last)"
else bad "-v 4 -x 6: $(grep -E '^val|error' $W/lastval.txt | head -3)"; fi
./train_gpt2 $SMALL -x -1 -d 8192 -i "$W/good_*.bin" -j "" > $W/epoch.txt 2>&1
if grep -q "^step     1/1 " $W/epoch.txt; then ok "-x -1 with -d beyond one epoch trains one step"
else bad "-x -1 with -d beyond one epoch: $(grep -E '^training|^step|error' $W/epoch.txt | head -3)"; fi
# --name=value is the same as --name value (the parser is common/args.h, shared by the trainers)
if ./train_gpt2 $SMALL --batch-size=3 -x 1 -i "$W/good_*.bin" -j "" > $W/eq.txt 2>&1 && grep -q "^training: B=3 " $W/eq.txt
then ok "--batch-size=3 sets B=3"
else bad "--batch-size=3: $(head -3 $W/eq.txt)"; fi
if [ -x ./train_gpt2cu ]; then
    # llm.c's GPT-2 124M run script, flag for flag: every flag is parsed with llm.c's meaning
    # (the run then stops at the data, which is not here); -h 1 (HellaSwag) is refused
    LLMC=(-i "no_fineweb/fineweb_train_*.bin" -j "no_fineweb/fineweb_val_*.bin" -o "$W/log124M" -e d12 -b 64
          -t 1024 -d 524288 -r 1 -z 1 -c 0.1 -l 0.0006 -q 0.0 -u 700 -n 5000 -v 250 -s 20000)
    TRAINER=./train_gpt2cu
    expect_error "llm.c's 124M script: -h 1 is refused, not help" "HellaSwag" "${LLMC[@]}" -h 1
    expect_error "llm.c's 124M script with -h 0: parsed, stops at the data" "no_fineweb" "${LLMC[@]}" -h 0
    expect_error "llm.c's other flags" "no_fineweb" "${LLMC[@]}" -h 0 -sl 5 -sg 5 -nk 3 -nm 1000 -ge 1 -lg -1 -f 1 \
        -w 1 -a 0 -x -1 -m 20 -g 144 -k cosine -y 0
    for f in -pn -pr -pg -pm -ps -pp; do expect_error "llm.c's $f" "mpirun" $SMALL $f 1; done
    expect_error "-lg other than -1" "nvidia-smi" $SMALL -lg 10
    expect_error "-ge 2" "-ge 1" $SMALL -ge 2
    ./train_gpt2cu -h > $W/help.txt 2>&1 && grep -q -- '--flash-attention' $W/help.txt && ok "train_gpt2cu -h alone prints the help" \
        || bad "train_gpt2cu -h alone: $(head -2 $W/help.txt)"
    # the GPU trainer's own flags, and multi-rank settings (ranks from the environment, as a
    # scheduler would give them; refused before any GPU or network work)
    TRAINER=./train_gpt2cu
    expect_error "ZeRO stage out of range" "-z (ZeRO stage) must be 0, 1, 2 or 3, got 4" $SMALL -z 4
    expect_error "-z 3 with --cuda-graph 1" "-z 3 with --cuda-graph 1" $SMALL -z 3 --cuda-graph 1
    expect_error "-z 3 with --fp8 1" "-z 3 with --fp8 1" $SMALL -z 3 --fp8 1
    # -z 3 plans wte, wpe, lnf and three layers' slots (--prefetch-layers 2) on the device (174.4M
    # of d48's 1.56G parameters: 0.32 GiB) and, with one rank and --offload 2, the rest of the
    # model in host memory
    expect_error "-z 3 --offload 2 plans the parameters' slots only" "parameters 0.32 GiB, gradients 2.90" \
        -e d48 -b 4 -t 1024 -d 524288 -r 3 -z 3 --offload 2 --max-device-memory 4G
    # ... and is suggested at its largest micro-batch (the copies per micro-step are the same at any B)
    # (a line that puts memory on the host names how much: 17.41 GiB of state and 2.90 of parameters
    # pinned, the fp32 model and its shard while the run starts, 512 MiB for the program)
    expect_error "GPT-2 1.5B in 8 GiB: one GPU with the parameters in host memory fits" \
        "--offload 2 -z 3 -r 3 -b 8 (64 micro-steps per step): 6.25 GiB, and 32.42 GiB of host memory" -e d48 -b 16 \
        -t 1024 -d 524288 -r 0 --max-device-memory 8G --max-host-memory 256G
    first_line "GPT-2 1.5B in 8 GiB" "  --offload 2 -z 3 -r 3 -b 8 "
    # ... and only where the host holds it
    expect_error "GPT-2 1.5B in 8 GiB: not on a host with 24 GiB" "-z 3 over 4 ranks" -e d48 -b 16 -t 1024 \
        -d 524288 -r 0 --max-device-memory 8G --max-host-memory 24G
    if grep -qF -- "--offload 2 -z 3" $W/err.txt; then bad "a line the host cannot hold: $(cat $W/err.txt)"
    else ok "a line the host cannot hold is not named"; fi
    expect_error "unknown communication backend" "--comm" $SMALL --comm carrier-pigeon
    expect_error "deterministic flag out of range" "--deterministic" $SMALL --deterministic 2
    for v in 16X 1X 0 -1 0G; do
        expect_error "--max-device-memory $v" "'$v' is not a size" $SMALL --max-device-memory $v
    done
    # the budget is checked against the plan before any GPU work, so a machine without one can
    # check a configuration: GPT-2 124M at B=64 needs ~28 GiB; 16 GiB names -b 32, which fits
    expect_error "a run over --max-device-memory names what fits" "-b 32 (16 micro-steps per step)" -e d12 -b 64 \
        -t 1024 -d 524288 -r 0 --max-device-memory 16G
    expect_error "GPT-2 1.5B in 16 GiB: ZeRO-1 over 2 ranks with -r 3 fits" \
        "-z 1 over 2 ranks (mpirun -np 2) -r 3 -b 2" -e d48 -b 16 -t 1024 -d 524288 -r 0 --max-device-memory 16G
    expect_error "GPT-2 1.5B in 16 GiB: the optimizer state in host memory fits at B=4 with -r 1" \
        "--offload 2 -r 1 -b 4 (128 micro-steps per step): 13.82 GiB, and 23.71 GiB of host memory" -e d48 -b 16 \
        -t 1024 -d 524288 -r 0 --max-device-memory 16G --max-host-memory 256G
    first_line "GPT-2 1.5B in 16 GiB" "  --offload 2 -r 1 -b 4 "
    # a switch is listed where it fits a larger micro-batch than the lines above at the same or
    # less recomputation: GPT-2 350M in 8 GiB gets --offload 2 -b 8 at its own -r 1 (the fastest
    # run measured in that budget), not only -r 3 -b 8
    expect_error "GPT-2 350M in 8 GiB: --offload 2 -b 8 at the run's -r 1" \
        "--offload 2 -b 8 (64 micro-steps per step): 7.22 GiB, and 5.79 GiB of host memory" \
        -e d24 -b 32 -t 1024 -d 524288 --max-device-memory 8G --max-host-memory 256G
    first_line "GPT-2 350M in 8 GiB" "  --offload 2 -b 8 "
    expect_error "GPT-2 124M in 4 GiB" "settings that fit" -e d12 -b 64 -t 1024 -d 524288 -r 0 \
        --max-device-memory 4G --max-host-memory 256G
    first_line "GPT-2 124M in 4 GiB" "  --offload 2 -b 8 "
    # the host memory, before any GPU work: --offload pins the optimizer state, a checkpoint holds
    # the fp32 model and its moments; a run over --max-host-memory (or what the host has) stops
    # naming what needs less
    expect_error "a run over --max-host-memory names what needs less" \
        "--max-host-memory 5.00 GiB: this run needs 5.79 GiB of host memory (optimizer state 3.97 GiB pinned" \
        -e d24 -b 8 -t 1024 --offload 2 --max-host-memory 5G
    grep -qF -- "--offload 0 (the state on the device" $W/err.txt && ok "... --offload 0 among them" \
        || bad "--offload 0 not named: $(cat $W/err.txt)"
    expect_error "a run with --offload prints its host memory plan, then stops at the data" "no_shards" \
        -e d12 -b 8 -t 1024 --offload 2 --max-host-memory 64G -i "no_shards/x_*.bin"
    grep -qF "host memory plan: 2.35 GiB of --max-host-memory 64.00 GiB (optimizer state 1.39 GiB pinned" \
        $W/out.txt && ok "... the plan: $(head -1 $W/out.txt)" || bad "no host memory plan: $(cat $W/out.txt)"
    expect_error "--max-host-memory without a unit" "--max-host-memory 30: give a unit" $SMALL --max-host-memory 30
    for v in 16X 0 -1; do
        expect_error "--max-host-memory $v" "'$v' is not a size" $SMALL --max-host-memory $v
    done
    expect_error "--offload out of range" "--offload must be 0, 1 or 2" $SMALL --offload 3
    # staged offload plans its two staging buffers: 2 x 4M x 12 bytes over --offload 1's 13.72 GiB
    expect_error "--offload 2 counts its staging buffers" "this run needs 13.82 GiB" -e d48 -b 4 -r 1 -t 1024 \
        -d 524288 --offload 2 --max-device-memory 13.75G
    expect_error "--cuda-graph out of range" "--cuda-graph must be 0 or 1" $SMALL --cuda-graph 2
    expect_error "--fp8 out of range" "--fp8 must be 0 or 1" $SMALL --fp8 2
    expect_error "--fp8-layers unknown" "--fp8-layers must be all, blocks, head, auto or a comma list of qkv, attproj, fc, fcproj and head, got 'mlp'" $SMALL --fp8 1 \
        --fp8-layers mlp
    expect_error "--fp8-layers list with an unknown kind" "got 'qkv,mlp'" $SMALL --fp8 1 --fp8-layers qkv,mlp
    expect_error "--fp8-layers list ending in a comma" "got 'qkv,'" $SMALL --fp8 1 --fp8-layers qkv,
    expect_error "--fp8-scaling unknown" "--fp8-scaling must be current or delayed" $SMALL --fp8 1 --fp8-scaling late
    expect_error "--fp8-weights unknown" "--fp8-weights must be kept, cast or auto, got 'some'" $SMALL --fp8 1 \
        --fp8-weights some
    # FP8 adds its weight copies (2 bytes a matmul weight; its operand buffers are lent memory):
    # at d12 B=64 they are 1% of the plan, so --fp8-weights auto keeps them
    expect_error "--fp8 1 counts its weight copies" "this run needs 23.69 GiB" -e d12 -b 64 -t 1024 \
        -d 524288 --fp8 1 --max-device-memory 23.5G
    # at d48 B=8 they would be 7%: auto casts the weights per matmul (one buffer), kept plans them all
    expect_error "--fp8-weights kept at d48 plans every copy" "this run needs 41.66 GiB" -e d48 -b 8 -t 1024 \
        -d 8192 --fp8 1 --fp8-weights kept --max-device-memory 40G
    expect_error "--fp8-weights auto at d48 casts" "this run needs 38.84 GiB" -e d48 -b 8 -t 1024 \
        -d 8192 --fp8 1 --max-device-memory 38.8G
    expect_error "--cuda-graph with --profile" "use one or the other" $SMALL --cuda-graph 1 --profile 1
    expect_error "13 GiB: whole-block recomputation keeps B=64" "-r 3: 12.09 GiB" -e d12 -b 64 -t 1024 -d 524288 \
        --max-device-memory 13G
    # without -d the tokens per step are B*T: a smaller -b comes with the -d that keeps them
    expect_error "a suggestion keeps the implied -d" "-b 32 -d 65536 (2 micro-steps per step)" -e d12 -b 64 -t 1024 \
        -r 0 --max-device-memory 16G
    expect_error "-r 4" "-r (recompute) must be 0, 1, 2 or 3" $SMALL -r 4
    export WORLD_SIZE=2 RANK=0
    expect_error "environment launch without an NCCL id file" "GPT2_NCCL_ID_FILE" $SMALL -d 64
    expect_error "MPI backend without mpirun" "--comm mpi" $SMALL -d 64 --comm mpi
    # ranks on one host share its memory
    LOCAL_WORLD_SIZE=3 expect_error "LOCAL_WORLD_SIZE above WORLD_SIZE" "LOCAL_WORLD_SIZE=3 must be from 1 to" $SMALL
    export GPT2_NCCL_ID_FILE=$W/nccl_id
    LOCAL_WORLD_SIZE=2 expect_error "two ranks on one host: half the host memory each" \
        "--max-host-memory 4.00 GiB: this run needs 2.35 GiB of host memory per rank (2 ranks on this host)" \
        -e d12 -b 8 -t 1024 -d 16384 --offload 2 --max-host-memory 4G
    expect_error "total batch not a multiple of B*T*ranks" "B*T*ranks" $SMALL -d 32
    expect_error "--cuda-graph with several ranks" "--cuda-graph 1 runs on one rank" $SMALL -d 64 --cuda-graph 1
    export WORLD_SIZE=3
    expect_error "ZeRO slices that do not split over the ranks" "-z 1 with 3 ranks" $SMALL -d 96 -z 1
    export WORLD_SIZE=2 RANK=2
    expect_error "rank outside the world" "RANK=2" $SMALL
    unset WORLD_SIZE RANK GPT2_NCCL_ID_FILE
else
    skip "./train_gpt2cu is not built (no nvcc): its command-line checks were not run"
fi

# a short run: the loss must fall
./train_gpt2 $SMALL -x 15 -l 3e-3 -s 15 > $W/short.txt 2>&1 || bad "short run exited non-zero"
first=$(grep -m1 '^step' $W/short.txt | awk -F'|' '{print $2}' | awk '{print $2}')
last=$(grep '^step' $W/short.txt | tail -1 | awk -F'|' '{print $2}' | awk '{print $2}')
if awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a - 0.5)}'; then ok "loss falls: $first -> $last"
else bad "loss did not fall: $first -> $last"; fi
grep -q '^sample: ' $W/short.txt && ok "-s 15 prints a sample" || bad "no sample printed"

# resume: 10 steps straight vs 5 steps, checkpoint, resume to 10
ARGS="$SMALL -x 10 -n 5 -l 1e-3 --shuffle 1 -d 64"
./train_gpt2 $ARGS -o $W/full > $W/full.txt 2>&1 || bad "full run failed"
./train_gpt2 $ARGS -o $W/part > /dev/null 2>&1 || bad "partial run failed"
rm -f $W/part/model_00000010.bin $W/part/state_00000010.bin
./train_gpt2 $ARGS -o $W/part -y 1 > $W/resumed.txt 2>&1 || bad "resumed run failed"
grep -q 'resumed from .* at step 5' $W/resumed.txt && ok "resumed at step 5" || bad "did not resume at step 5"
losses() { grep '^step' "$1" | awk -F'|' '{print $1, $2, $3}' | tail -5; }
if [ -n "$(losses $W/full.txt)" ] && [ "$(losses $W/full.txt)" = "$(losses $W/resumed.txt)" ]; then ok "resumed losses and norms equal the uninterrupted run (steps 6-10)"
else bad "resume is not bit-exact:"; diff <(losses $W/full.txt) <(losses $W/resumed.txt); fi
if cmp -s $W/full/model_00000010.bin $W/part/model_00000010.bin; then ok "final checkpoints are identical"
else bad "final checkpoints differ"; fi

# --loader-threads 1: the same batches in the same order, so the same steps; a run resumed
# from the thread's checkpoint (taken while it read ahead) repeats the uninterrupted run;
# with every read throttled to 20 ms (a slow disk) the training loop waits for its batches
# without the thread and not with it
./train_gpt2 $ARGS --loader-threads 1 -o $W/thr_full > $W/thr_full.txt 2>&1 || bad "--loader-threads 1 run failed"
if [ "$(losses $W/full.txt)" = "$(losses $W/thr_full.txt)" ] && cmp -s $W/full/model_00000010.bin \
    $W/thr_full/model_00000010.bin; then ok "--loader-threads 1: the same steps and final model as without"
else bad "--loader-threads 1 differs:"; diff <(losses $W/full.txt) <(losses $W/thr_full.txt); fi
./train_gpt2 $ARGS --loader-threads 1 -o $W/thr_part > /dev/null 2>&1 || bad "--loader-threads 1 partial run failed"
rm -f $W/thr_part/model_00000010.bin $W/thr_part/state_00000010.bin
./train_gpt2 $ARGS --loader-threads 1 -o $W/thr_part -y 1 > $W/thr_resumed.txt 2>&1 || bad "thread resume failed"
if [ "$(losses $W/full.txt)" = "$(losses $W/thr_resumed.txt)" ] && cmp -s $W/full/model_00000010.bin \
    $W/thr_part/model_00000010.bin; then ok "--loader-threads 1: resumed at step 5, bit-exact to the end"
else bad "--loader-threads 1 resume is not bit-exact"; fi
stall() { grep -o 'data: [0-9.]* ms per step' "$1" | awk '{print $2}'; }
for thr in 0 1; do  # one OpenMP thread: a step takes well over a read on any machine
    GPT2_TEST_READ_DELAY_MS=20 OMP_NUM_THREADS=1 ./train_gpt2 -e l2h2c64t64 -b 4 -t 64 -x 30 -v 0 -s 0 \
        --loader-threads $thr > $W/slow$thr.txt 2>&1 || bad "throttled run with --loader-threads $thr failed"
done
s0=$(stall $W/slow0.txt)
s1=$(stall $W/slow1.txt)
# the reads alone take 20 ms; a step of this model takes longer, so the thread keeps ahead
# (its first batch is waited for: 20 ms over 30 steps)
if [ -n "$s0" ] && [ -n "$s1" ] && awk -v a="$s0" -v b="$s1" 'BEGIN { exit !(a >= 19 && b < 5) }'; then
    ok "20 ms reads: the loop waits $s0 ms a step without the thread, $s1 ms with it"
else bad "20 ms reads: waits '$s0' ms a step without the thread, '$s1' with it (expected >= 19 and < 5)"; fi
TRAINER=./train_gpt2 expect_error "--loader-threads 2" "--loader-threads must be 0 or 1" $SMALL --loader-threads 2
# a bad shard the thread reads ahead stops the run at the same step, with the same message
# and checkpoints, as without the thread (not up to four batches early)
for thr in 0 1; do
    ./train_gpt2 $SMALL -x 100 -i "$W/bad_*.bin" -j "" --check-data 0 -n 1 -o $W/badthr$thr --loader-threads $thr \
        > $W/badthr$thr.txt 2> $W/badthr${thr}_err.txt
done
if [ "$(grep -c '^step' $W/badthr0.txt)" = "$(grep -c '^step' $W/badthr1.txt)" ] &&
   [ "$(grep -c '^step' $W/badthr0.txt)" -gt 0 ] &&
   [ "$(sed 's/badthr0/badthr/g' $W/badthr0_err.txt)" = "$(sed 's/badthr1/badthr/g' $W/badthr1_err.txt)" ] &&
   [ "$(ls $W/badthr0 | grep -c model_)" = "$(ls $W/badthr1 | grep -c model_)" ]; then
    ok "a bad shard read ahead by the thread stops the run at step $(grep -c '^step' $W/badthr1.txt), as without it"
else bad "bad shard with the thread: $(grep -c '^step' $W/badthr1.txt) steps, without $(grep -c '^step' $W/badthr0.txt);" \
    "$(cat $W/badthr1_err.txt)"; fi

# --check-data 0: a bad train shard is found when it is first read, and named
./train_gpt2 $SMALL -x 100 -i "$W/bad_*.bin" -j "" --check-data 0 > $W/late.txt 2> $W/late_err.txt
st=$?
if [ $st -eq 1 ] && grep -q '^step' $W/late.txt && grep -q 'bad_001.bin' $W/late_err.txt; then
    ok "--check-data 0: the bad shard is named when first read ($(grep -c '^step' $W/late.txt) steps before)"
else bad "--check-data 0 with a bad second shard (exit $st): $(cat $W/late_err.txt)"; fi

# -y 1 with no checkpoint yet starts fresh (a restart loop always passes -y 1)
RUN="$SMALL -x 10 -n 5 -v 5 -m 2 -l 1e-3 -d 64"
./train_gpt2 $RUN -o $W/y -y 1 > $W/y1.txt 2>&1
if [ $? -eq 0 ] && grep -q 'starting fresh' $W/y1.txt && [ -f $W/y/state_00000010.bin ]; then ok "-y 1 without a checkpoint starts fresh"
else bad "-y 1 without a checkpoint: $(tail -3 $W/y1.txt)"; fi
cp $W/y/main.log $W/y_full.log
# a crash after step 10's checkpoint began: its state is corrupt, and the log ran past step 5
printf 'garbage' | dd of=$W/y/state_00000010.bin bs=1 seek=3000 conv=notrunc 2> /dev/null
echo "step    99/10 | a line the crashed run wrote after its checkpoint" >> $W/y/main.log
./train_gpt2 $RUN -o $W/y -y 1 > $W/y2.txt 2>&1
if [ $? -eq 0 ] && grep -q 'skipping the checkpoint of step 10.*checksum' $W/y2.txt && grep -q 'at step 5' $W/y2.txt
then ok "a corrupt newest checkpoint is skipped with a warning; resumed at step 5"
else bad "corrupt newest checkpoint: $(cat $W/y2.txt | head -5)"; fi
fields() { grep -v '^sample' "$1" | awk -F'|' '{print $1, $2, $3, $4}'; }
if [ "$(fields $W/y_full.log)" = "$(fields $W/y/main.log)" ]; then ok "main.log after the resume holds each step once"
else bad "main.log after the resume differs:"; diff <(fields $W/y_full.log) <(fields $W/y/main.log) | head; fi
./train_gpt2 $RUN -o $W/y -y 1 -l 2e-3 -x 10 > $W/y3.txt 2>&1
if grep -q 'resume: -l (learning rate) was 0.001, now 0.002' $W/y3.txt && grep -q 'finished at step 10' $W/y3.txt
then ok "resuming says what changed, and that the run had finished"
else bad "resume messages: $(head -8 $W/y3.txt)"; fi

# metrics.jsonl after a crash and two resumes (one of a finished run): every line parses,
# the fields are there and finite, the steps run once each (scripts/plot_metrics.py)
if ${PYTHON:-python3} scripts/plot_metrics.py --validate $W/y > $W/validate.txt 2>&1; then
    ok "metrics.jsonl after resumes: $(tail -1 $W/validate.txt)"
else bad "metrics.jsonl after resumes: $(tail -3 $W/validate.txt)"; fi

# a run whose every update is skipped stops (a learning rate that blows the weights up)
./train_gpt2 $SMALL -x 50 -l 1e30 --max-skipped-updates 5 > $W/nan.txt 2> $W/nan_err.txt
st=$?
if [ $st -eq 1 ] && grep -q '5 updates in a row were skipped' $W/nan_err.txt; then ok "5 skipped updates in a row stop the run"
else bad "skipped updates (exit $st): $(tail -2 $W/nan_err.txt)"; fi

# a model whose vocabulary is not GPT-2's: no sampling, and the final checkpoint is written
python3 - $W/small_vocab.bin << 'EOF2'
import struct, sys, random
L, H, C, T, V, Vp = 1, 1, 8, 16, 1000, 1024
n = Vp*C + T*C + L*(2*C + 3*C*C + 3*C + C*C + C + 2*C + 4*C*C + 4*C + 4*C*C + C) + 2*C
h = [20240326, 3, T, V, L, H, C, Vp] + [0] * 248
random.seed(1)
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + struct.pack("<%df" % n, *[random.gauss(0, 0.02) for _ in range(n)]))
EOF2
./train_gpt2 -e $W/small_vocab.bin -b 2 -t 8 -x 3 -i "$W/good_*.bin" -j "" -o $W/sv > $W/sv.txt 2>&1
st=$?
if [ $st -eq 0 ] && grep -q 'sampling: off' $W/sv.txt && [ -f $W/sv/model_00000003.bin ]; then ok "small vocabulary: sampling off, final checkpoint written"
else bad "small vocabulary run (exit $st): $(tail -3 $W/sv.txt)"; fi

# llm.c's meanings: -s 0 never samples and -n 0 writes no checkpoint, the last step included;
# without -n, a run with -o writes the last step's checkpoint only
./train_gpt2 $SMALL -x 3 -g 4 -s 0 -n 0 -o $W/never > $W/never.txt 2>&1
st=$?
if [ $st -eq 0 ] && ! grep -q '^sample' $W/never.txt && [ -z "$(ls $W/never/ | grep -E 'model_|state_')" ]; then
    ok "-s 0 -n 0: no sample, no checkpoint"
else bad "-s 0 -n 0 (exit $st): $(grep '^sample' $W/never.txt) $(ls $W/never/)"; fi
./train_gpt2 $SMALL -x 3 -o $W/default_n > $W/default_n.txt 2>&1
if [ "$(ls $W/default_n/ | grep -E '^(model|state)_' | tr '\n' ' ')" = "model_00000003.bin state_00000003.bin " ]; then
    ok "no -n: the last step's checkpoint only"
else bad "no -n: checkpoints $(ls $W/default_n/)"; fi

# -v 0 never validates and -g 0 never samples, the last step included
./train_gpt2 $SMALL -x 4 -v 0 -g 0 > $W/quiet.txt 2>&1
if ! grep -q '^val loss\|^sample' $W/quiet.txt; then ok "-v 0 and -g 0: no validation, no sample"
else bad "-v 0 -g 0 still printed: $(grep '^val loss\|^sample' $W/quiet.txt)"; fi
# -v 0 reads no validation data, so a -j that would be refused does not stop the run
./train_gpt2 $SMALL -x 2 -v 0 -j "$W/no_such_val_*.bin" > $W/noval.txt 2>&1
st=$?
if [ $st = 0 ]; then ok "-v 0: the validation shards are not read (a -j matching nothing runs)"
else bad "-v 0 with a -j matching nothing: exit $st: $(tail -1 $W/noval.txt)"; fi
./train_gpt2 $SMALL -x 2 -v 1 -j "$W/no_such_val_*.bin" > $W/noval1.txt 2>&1
st=$?
if [ $st = 1 ] && grep -q "no data shards match the pattern '$W/no_such_val_\*.bin'" $W/noval1.txt; then
    ok "-v 1: a -j matching nothing is refused, naming the pattern"
else bad "-v 1 with a -j matching nothing: exit $st: $(tail -1 $W/noval1.txt)"; fi

# -a 1 (one batch) with validation trains on the same batch as without it
OVF="$SMALL -x 12 -a 1 -l 1e-3 -k constant"
./train_gpt2 $OVF -v 0 > $W/ovf0.txt 2>&1
./train_gpt2 $OVF -v 3 -m 2 > $W/ovf3.txt 2>&1
if [ -n "$(losses $W/ovf0.txt)" ] && [ "$(losses $W/ovf0.txt)" = "$(losses $W/ovf3.txt)" ]; then ok "-a 1: validation does not replace the batch"
else bad "-a 1 with validation trains on another batch:"; diff <(losses $W/ovf0.txt) <(losses $W/ovf3.txt); fi

# a skipped update does not advance AdamW's step count: on one batch with a constant lr, 10
# steps with step 4 skipped end where 9 steps without a skip do (test hook: an overflow)
GPT2_TEST_OVERFLOW_STEPS=4 ./train_gpt2 $OVF -x 10 -v 0 -g 0 -o $W/skip10 > $W/skip10.txt 2>&1
./train_gpt2 $OVF -x 9 -v 0 -g 0 -o $W/noskip9 > $W/noskip9.txt 2>&1
if grep -q 'step 4: non-finite gradient norm; update skipped' $W/skip10.txt &&
   cmp -s $W/skip10/model_00000010.bin $W/noskip9/model_00000009.bin; then
    ok "a skipped update leaves AdamW's bias correction where it was"
else bad "skipped update and AdamW's step count: $(grep -c skipped $W/skip10.txt) skips; models differ"; fi

# metrics.jsonl ends with the run's summary record: its last step, the updates skipped (two
# steps forced non-finite), the means over the steps after the first, equal to those of the
# step records; no MFU, energy or device memory on the CPU; scripts/run_summary.py reads it
GPT2_TEST_OVERFLOW_STEPS=2,5 ./train_gpt2 $SMALL -x 7 -n 0 -o $W/summary > $W/summary.txt 2>&1 ||
    bad "the run with two forced skips failed: $(tail -2 $W/summary.txt)"
if ${PYTHON:-python3} - $W/summary/metrics.jsonl > $W/summary_check.txt 2>&1 << 'EOF2'
import json, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
s = recs[-1]
assert s["type"] == "summary", "the last record is %r, not the summary" % s["type"]
want = {"first_step": 2, "last_step": 7, "timed_steps": 6, "skipped_updates": 2, "mfu": None,
        "joules_per_step": None, "device_peak_mib": None}
for k, v in want.items():
    assert s[k] == v, "%s is %r, want %r" % (k, s[k], v)
for k in ("ms_per_step", "tokens_per_s", "gflops", "host_peak_mib"):
    assert isinstance(s[k], (int, float)) and s[k] > 0, "%s is %r, not a positive number" % (k, s[k])
assert isinstance(s["data_stall_ms"], (int, float)) and s["data_stall_ms"] >= 0, "data_stall_ms %r" % s["data_stall_ms"]
ms = [r["ms"] for r in recs if r["type"] == "step" and r["step"] >= 2]
mean = sum(ms) / len(ms)
assert abs(s["ms_per_step"] - mean) <= 1e-6 * mean, "ms_per_step %r, the steps' mean %r" % (s["ms_per_step"], mean)
tps = 32 * 1e3 / mean  # B*T = 32 tokens a step
assert abs(s["tokens_per_s"] - tps) <= 1e-6 * tps, "tokens_per_s %r, want %r" % (s["tokens_per_s"], tps)
print("%.3f ms/step, %.0f tok/s over steps 2..7, 2 skipped" % (s["ms_per_step"], s["tokens_per_s"]))
EOF2
then ok "metrics.jsonl ends with the run's summary: $(cat $W/summary_check.txt)"
else bad "the summary record: $(tail -3 $W/summary_check.txt)"; fi
read_back=$(${PYTHON:-python3} scripts/run_summary.py $W/summary last_step skipped_updates mfu 2>&1)
if [ "$read_back" = "$(printf '7\t2\t-')" ] &&
   ${PYTHON:-python3} scripts/plot_metrics.py --validate $W/summary > /dev/null 2>&1; then
    ok "scripts/run_summary.py reads the CPU run's summary; the file is valid"
else bad "reading the CPU run's summary: '$read_back'"; fi

# -nk / -nm: the newest N checkpoints stay, and every M-th step's; -y 1 takes the newest
./train_gpt2 $SMALL -x 10 -n 1 -nk 2 -nm 4 -g 0 -o $W/nk > $W/nk.txt 2>&1
kept=$(cd $W/nk && ls model_*.bin state_*.bin 2>/dev/null | sed 's/[^0-9]//g; s/^0*//' | sort -n | uniq | tr '\n' ' ')
if [ "$kept" = "4 8 9 10 " ] && [ "$(ls $W/nk/model_*.bin | wc -l)" = 4 ]; then ok "-nk 2 -nm 4 keeps steps $kept"
else bad "-nk 2 -nm 4 kept: '$kept'"; fi
./train_gpt2 $SMALL -x 12 -n 1 -nk 2 -nm 4 -g 0 -o $W/nk -y 1 > $W/nk2.txt 2>&1
grep -q 'resumed from .* at step 10' $W/nk2.txt && [ ! -f $W/nk/model_00000010.bin ] && [ -f $W/nk/model_00000008.bin ] &&
    ok "-nk after a resume: step 10 pruned, the major step 8 kept" || bad "-nk after a resume: $(ls $W/nk | tr '\n' ' ')"

# -sl / -sg: a shard that repeats one pattern, with one batch of other tokens at step 297: once
# the model has learnt the pattern, that batch's loss and norm are outliers and its update is
# skipped; a run resumed in the middle skips it too (the windows are in the state)
python3 -c 'import struct, random
random.seed(7)
ids = [(i % 5) + 1 for i in range(320 * 32)]
for k in range(296 * 32 + 1, 297 * 32): ids[k] = random.randrange(50257)  # in the 297th batch alone
h = [20240520, 1, len(ids)] + [0] * 253
open("'$W'/spike_000.bin", "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(ids), *ids))'
SPIKE=(-e l2h2c32t32 -b 2 -t 16 -x 300 -l 3e-3 -k constant -g 0 -v 0 -i "$W/spike_*.bin" -j "")
./train_gpt2 "${SPIKE[@]}" > $W/spike0.txt 2>&1
./train_gpt2 "${SPIKE[@]}" -sl 4 -sg 4 -n 290 -o $W/spike > $W/spike1.txt 2>&1
if ! grep -q outlier $W/spike0.txt && grep -q 'step 297: outlier loss' $W/spike1.txt &&
   [ "$(grep -c 'update skipped' $W/spike1.txt)" = 1 ]; then ok "-sl 4: the spike at step 297 alone is skipped"
else bad "-sl: $(grep -E 'outlier|skipped' $W/spike1.txt | head -3)"; fi
./train_gpt2 "${SPIKE[@]}" -sg 4 > $W/spike2.txt 2>&1
grep -q 'step 297: outlier gradient norm' $W/spike2.txt && ok "-sg 4: the spike's gradient norm is an outlier too" \
    || bad "-sg: $(grep -E 'outlier|skipped' $W/spike2.txt | head -3)"
cp $W/spike/model_00000300.bin $W/straight_model_300.bin
rm $W/spike/model_00000300.bin $W/spike/state_00000300.bin
./train_gpt2 "${SPIKE[@]}" -sl 4 -sg 4 -n 290 -o $W/spike -y 1 > $W/spike3.txt 2>&1
if grep -q 'step 297: outlier loss' $W/spike3.txt && cmp -s $W/straight_model_300.bin $W/spike/model_00000300.bin &&
   ${PYTHON:-python3} scripts/plot_metrics.py --validate $W/spike > /dev/null 2>&1
then ok "-sl resumed at step 290: the same skip, the same final model, a valid metrics.jsonl"
else bad "-sl resume: $(grep -E 'resumed|outlier' $W/spike3.txt | head -3)"; fi

# a model file is a regular file or a Hugging Face directory: -e naming a FIFO is refused before
# it is opened (opening one waits for a writer, forever if none comes), and a safetensors file
# is named as one, with its directory to pass instead
mkfifo $W/model.fifo
mkdir -p $W/hf
python3 -c 'import struct, sys
h = b"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}"
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(4))' $W/hf/model.safetensors
for t in $trainers; do
    TRAINER="timeout 10 $t"
    expect_error "-e FIFO" "$W/model.fifo is a FIFO" -e $W/model.fifo -x 1
    expect_error "--generate -e FIFO" "$W/model.fifo is a FIFO" --generate -e $W/model.fifo
    TRAINER=$t
    expect_error "-e DIR/model.safetensors" "is a safetensors file, not a model checkpoint: -e takes its directory, \
$W/hf " -e $W/hf/model.safetensors -x 1
done
# the GPU trainer's FP8 options mean nothing without --fp8 1: given, even as their defaults,
# they are refused, not ignored; --max-device-memory without a unit would be bytes
if [ -x ./train_gpt2cu ]; then
    TRAINER=./train_gpt2cu
    expect_error "--fp8-layers without --fp8 1" "--fp8-layers all: needs --fp8 1" $SMALL --fp8-layers all
    expect_error "--fp8-scaling without --fp8 1" "--fp8-scaling current: needs --fp8 1" $SMALL --fp8-scaling current
    expect_error "--fp8-weights without --fp8 1" "--fp8-weights kept: needs --fp8 1" $SMALL --fp8-weights kept
    expect_error "--fp8 0 with --fp8-layers auto, the default's value" "--fp8-layers auto: needs --fp8 1" $SMALL \
        --fp8 0 --fp8-layers auto
    for v in 16 0.5 123456; do
        expect_error "--max-device-memory $v (no unit)" "--max-device-memory $v: give a unit, K, M, G or T" $SMALL \
            --max-device-memory $v
    done
fi

test_finish
