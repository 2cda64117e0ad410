#!/usr/bin/env bash
# One prepared GPU session (issue 13, item 6), at most 8 minutes on an H200:
#   1. device facts (nvidia-smi, torch's mem_get_info total: the KV plan's cuda_total_gib);
#   2. `tidal profile-gpu` of llama-3.1-8b and qwen3-8b → $OUT/profile-h200.json
#      (tidal-gpu-profile/1; becomes the catalog's H200 data once committed), and its step
#      times beside the EB paper's measured H200 constants and the rooflines
#      (bench/gpu/crosscheck.py → $OUT/crosscheck.json, crosscheck.txt);
#   3. `tidal serve` once on CUDA (bf16, dummy weights): start, a few requests over loopback
#      (bench/gpu/serve_smoke.py), stop → $OUT/serve.json, serve.log;
#   4. a short sim-vs-engine fidelity run on CUDA: `tidal calibrate` (small grid) then
#      `tidal fidelity` → $OUT/fidelity/, calibrate.txt, fidelity.txt.
# Every step has a time limit taken from what is left of the 8 minutes; a step that fails or
# runs out is recorded in $OUT/steps.tsv and the script goes on.
#
# Usage:  OUT=DIR bench/gpu/h200.sh          (on the GPU machine, from the repository root)
#         OUT=DIR bench/gpu/h200.sh --cpu    (dry run on a CPU: tiny-llama, tiny grids, ~1 min)
set -uo pipefail
mode=gpu
[ "${1:-}" = "--cpu" ] && mode=cpu
OUT=${OUT:-$PWD/gpu-out}
BUDGET_S=${BUDGET_S:-470}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python}
tidal() { "$PY" -c 'import sys; from tidal.cli import main; sys.argv[0] = "tidal"; main()' "$@"; }
start=$(date +%s)
left() { echo $((BUDGET_S - ($(date +%s) - start))); }

# step NAME MAX_S CMD...: run CMD under min(MAX_S, time left − 5 s); record rc and seconds.
step() {
    local name=$1 max=$2
    shift 2
    local lim
    lim=$(left)
    lim=$((lim - 5 < max ? lim - 5 : max))
    if [ "$lim" -lt 10 ]; then
        printf '%s\tskipped\t0\n' "$name" >> "$OUT/steps.tsv"
        return 0
    fi
    local t0=$(date +%s) rc=0
    timeout --kill-after=5 "$lim" "$@" || rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" $(($(date +%s) - t0)) >> "$OUT/steps.tsv"
    return 0
}

if [ "$mode" = cpu ]; then
    # dry run: CPU times of tiny shapes, labelled h200 only so that crosscheck.py runs
    device=cpu dtype=float32 grid=tiny models=(tiny-llama) serve_model=tiny-llama
    label=(--gpu h200 --threads 1) prof="$OUT/profile-cpu.json"
    cal=(--max-batch 16 --max-ctx 256 --max-prompt 512 --threads 1)
    fid=(--num-requests 40 --rate 5 --prompt-len 128 --output-len 32 --threads 1)
else
    device=cuda dtype=bfloat16 grid=full models=(llama-3.1-8b qwen3-8b)
    label=() prof="$OUT/profile-h200.json"   # GPU name from the device (h200 on an H200)
    serve_model=${SERVE_MODEL:-llama-3.1-8b}
    cal=(--max-batch 64 --max-ctx 1024 --max-prompt 2048)
    fid=(--num-requests 80 --rate 4 --prompt-len 512 --output-len 64 --token-budget 2048
         --num-kv-blocks 8192)
fi
printf 'step\trc\tseconds\n' > "$OUT/steps.tsv"
{
    date -u
    uptime
    git rev-parse HEAD 2>/dev/null
    command -v nvidia-smi > /dev/null && nvidia-smi
} > "$OUT/env.txt" 2>&1
"$PY" - > "$OUT/device.json" 2>> "$OUT/env.txt" <<'EOF'
import json, torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "available": torch.cuda.is_available()}
if torch.cuda.is_available():
    free, total = torch.cuda.mem_get_info()
    info.update(name=torch.cuda.get_device_name(), total_bytes=total, free_bytes=free,
                total_gib=total / 2**30)
print(json.dumps(info, indent=2))
EOF

# 2. operator profiles, then their step times beside the other perf models
for m in "${models[@]}"; do
    step "profile-$m" 150 tidal profile-gpu --model "$m" --device "$device" --dtype "$dtype" \
        --grid "$grid" "${label[@]}" --out "$prof" > "$OUT/profile-$m.txt" 2>&1
done
if [ -s "$prof" ]; then
    step crosscheck 30 "$PY" bench/gpu/crosscheck.py "$prof" --out "$OUT/crosscheck.json" \
        > "$OUT/crosscheck.txt" 2>&1
fi

# 3. tidal serve on the device, a few loopback requests, stop
port=${PORT:-8765}
tidal serve --model "$serve_model" --device "$device" --dtype "$dtype" --port "$port" \
    --kv-cache-gb 4 --token-budget 2048 --max-seqs 64 > "$OUT/serve.log" 2>&1 &
server=$!
step serve-smoke 150 "$PY" bench/gpu/serve_smoke.py --port "$port" --model "$serve_model" \
    --out "$OUT/serve.json" --wait 140 >> "$OUT/serve.log" 2>&1
kill "$server" 2> /dev/null
wait "$server" 2> /dev/null

# 4. calibrate the engine on the device, then replay a workload in both backends
step calibrate 120 tidal calibrate --model "$serve_model" --device "$device" --dtype "$dtype" \
    --repeats 1 --no-serving "${cal[@]}" --out "$OUT/engine_profile.json" \
    > "$OUT/calibrate.txt" 2>&1
if [ -s "$OUT/engine_profile.json" ]; then
    step fidelity 150 tidal fidelity --model "$serve_model" --device "$device" --dtype "$dtype" \
        --profile "$OUT/engine_profile.json" "${fid[@]}" --out "$OUT/fidelity" \
        > "$OUT/fidelity.txt" 2>&1
fi
echo "elapsed $(($(date +%s) - start)) s of $BUDGET_S" >> "$OUT/steps.tsv"
cat "$OUT/steps.tsv"
