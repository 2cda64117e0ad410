#!/usr/bin/env bash
# Simulator fidelity against the real engine on this machine (BENCHMARKS.d/issue6.md).
# Usage: bench/engine_fidelity.sh OUT_DIR [cpu|wall]
# Calibrates tiny-llama on one CPU thread, then replays a steady Poisson and a bursty Gamma
# (CV 3) workload through the real engine (3 runs each) and through the simulator.
set -euo pipefail
out=${1:?usage: bench/engine_fidelity.sh OUT_DIR [cpu|wall]}
clock=${2:-cpu}
mkdir -p "$out"
nice tidal calibrate --model tiny-llama --out "$out/profile.json" --threads 1 --repeats 2 \
    --clock "$clock" | tee "$out/calibrate.txt"
common=(--model tiny-llama --profile "$out/profile.json" --num-requests 300 --rate 15
        --prompt-len 128 --output-len 64 --length-dist uniform --token-budget 512
        --max-seqs 64 --num-kv-blocks 2048 --threads 1 --repeats 3 --clock "$clock")
nice tidal fidelity "${common[@]}" --arrival-cv 1 --out "$out/poisson" | tee "$out/poisson.txt"
nice tidal fidelity "${common[@]}" --arrival-cv 3 --out "$out/gamma3" | tee "$out/gamma3.txt"
