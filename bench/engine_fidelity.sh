#!/usr/bin/env bash
# Simulator fidelity against the real engine on this machine (BENCHMARKS.md, issue 6).
# Usage: bench/engine_fidelity.sh OUT_DIR [cpu|wall] [long|short|shared] [mb|eb|ebplus]
#
# long (default, the fidelity workload of BENCHMARKS.md, issue 6, 2026-11-29 night section):
#   prompts uniform 384-1152 tokens prefilled in chunks of a 64-token budget (12 steps per
#   prompt), outputs 32-96, 3 req/s (the engine ~45-60 % busy); calibrated with serving points
#   drawn from the same length distributions and budget and fitted to those steps only
#   (`--fit-on serving`); each real run sits between two replays of 40 held-out requests (the
#   workload under another seed) that rescale the profile to the machine's current speed
#   (`--recalibrate`); 40 requests of warm-up first.
# short: the first workload measured (prompts 64-192, 15 req/s, budget 512), profile as is.
# shared (issue 14): 4 shared 256-token system prompts, each request's own question 32-96
#   tokens, outputs 16-48, 8 req/s, prefix caching on in both backends (same block size), the
#   short profile; fidelity.json's prefix_cache has both backends' hit rates.
#
# Calibrates tiny-llama on one CPU thread, then replays a steady Poisson and a bursty Gamma
# (CV 3) workload through the real engine (3 runs each) and through the simulator.
set -euo pipefail
out=${1:?usage: bench/engine_fidelity.sh OUT_DIR [cpu|wall] [long|short|shared] [mb|eb|ebplus]}
clock=${2:-cpu}
shape=${3:-long}
batching=${4:-mb}   # both backends run this batching policy (EB costs from the profile)
mkdir -p "$out"
uptime | tee "$out/load.txt"
if [ "$shape" = long ]; then
    nice tidal calibrate --model tiny-llama --out "$out/profile.json" --threads 1 --repeats 2 \
        --clock "$clock" --serving-prompt-len 768 --serving-output-len 64 \
        --serving-token-budget 64 --serving-concurrency 2,4,8,16 --fit-on serving \
        | tee "$out/calibrate.txt"
    common=(--model tiny-llama --profile "$out/profile.json" --num-requests 200 --rate 3
            --prompt-len 768 --output-len 64 --length-dist uniform --token-budget 64
            --max-seqs 64 --num-kv-blocks 4096 --threads 1 --repeats 3 --clock "$clock"
            --warmup-requests 40 --recalibrate 40)
elif [ "$shape" = shared ]; then
    nice tidal calibrate --model tiny-llama --out "$out/profile.json" --threads 1 --repeats 2 \
        --clock "$clock" | tee "$out/calibrate.txt"
    common=(--model tiny-llama --profile "$out/profile.json" --num-requests 120 --rate 8
            --prompt-len 64 --output-len 32 --length-dist uniform --token-budget 512
            --max-seqs 64 --num-kv-blocks 2048 --threads 1 --repeats 3 --clock "$clock"
            --warmup-requests 40 --recalibrate 40 --shared-prefix-groups 4
            --shared-prefix-len 256)
    nice tidal fidelity "${common[@]}" --batching "$batching" --out "$out/shared" \
        | tee "$out/shared.txt"
    uptime | tee -a "$out/load.txt"
    exit 0
else
    nice tidal calibrate --model tiny-llama --out "$out/profile.json" --threads 1 --repeats 2 \
        --clock "$clock" | tee "$out/calibrate.txt"
    common=(--model tiny-llama --profile "$out/profile.json" --num-requests 300 --rate 15
            --prompt-len 128 --output-len 64 --length-dist uniform --token-budget 512
            --max-seqs 64 --num-kv-blocks 2048 --threads 1 --repeats 3 --clock "$clock")
fi
common+=(--batching "$batching")
nice tidal fidelity "${common[@]}" --arrival-cv 1 --out "$out/poisson" | tee "$out/poisson.txt"
uptime | tee -a "$out/load.txt"
nice tidal fidelity "${common[@]}" --arrival-cv 3 --out "$out/gamma3" | tee "$out/gamma3.txt"
uptime | tee -a "$out/load.txt"
