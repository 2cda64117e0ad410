#!/usr/bin/env bash
# Issue 17: `tidal bench serve` against a live `tidal serve` (tiny-llama, one CPU thread) on a
# free loopback port; the client's TTFT/TPOT beside the server's /metrics histograms; then the
# measured run replayed and compared in the simulator with a calibrated CPU profile.
# Usage: bash bench/bench_serve.sh OUT_DIR   (about 5 minutes on the shared 2-core VM)
set -euo pipefail
OUT=${1:-bench/out/bench_serve}
mkdir -p "$OUT"
PORT=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT
tidal serve tiny-llama --port "$PORT" --threads 1 > "$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 120); do curl -sf "$URL/health" > /dev/null && break; sleep 0.5; done
kill -0 $SERVER  # our server, not another process on the port
uptime | tee "$OUT/uptime.txt"
for RATE in 3 10; do
  curl -s "$URL/metrics" > "$OUT/metrics_before_$RATE.txt"
  tidal bench serve --base-url "$URL" --num-prompts 200 --request-rate $RATE \
      --random-input-len 128 --random-output-len 32 --ignore-eos --seed 0 \
      --result-dir "$OUT/measured_$RATE"
  curl -s "$URL/metrics" > "$OUT/metrics_after_$RATE.txt"
done
uptime | tee -a "$OUT/uptime.txt"
kill $SERVER
tidal calibrate --out "$OUT/cpu.json" --threads 1 --repeats 1 --max-batch 32 --max-ctx 256 \
    --max-prompt 512 --no-serving
for RATE in 3 10; do
  tidal fidelity --measured "$OUT/measured_$RATE" --model tiny-llama --profile "$OUT/cpu.json" \
      --out "$OUT/fid_$RATE"
done
uptime | tee -a "$OUT/uptime.txt"
python - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
def hist(path):
    v = {}
    for line in open(path):
        m = re.match(r"^tidal:(time_to_first_token|time_per_output_token)_seconds_(sum|count) (\S+)", line)
        if m:
            v[f"{m.group(1)}_{m.group(2)}"] = float(m.group(3))
    return v
for rate in (3, 10):
    a, b = hist(f"{out}/metrics_before_{rate}.txt"), hist(f"{out}/metrics_after_{rate}.txt")
    d = {k: b[k] - a.get(k, 0.0) for k in b}
    m = json.load(open(f"{out}/measured_{rate}/summary.json"))["metrics"]
    f = json.load(open(f"{out}/fid_{rate}/fidelity.json"))
    print(f"rate {rate}: sent {m['num_requests']} completed {m['num_completed']} failed {m['num_failed']}; "
          f"server requests {d['time_to_first_token_count']:.0f}")
    print(f"  TTFT mean: client {m['ttft_mean_s']*1e3:.1f} ms, server {d['time_to_first_token_sum']/d['time_to_first_token_count']*1e3:.1f} ms")
    print(f"  TPOT mean: client {m['tpot_mean_s']*1e3:.2f} ms, server {d['time_per_output_token_sum']/d['time_per_output_token_count']*1e3:.2f} ms; ITL mean {m['itl_mean_s']*1e3:.2f} ms")
    print(f"  fidelity (median |rel err|): TTFT {f['ttft_median_rel_error']:.1%} TPOT {f['tpot_median_rel_error']:.1%} E2E {f['e2e_median_rel_error']:.1%}; "
          f"P50 shift TTFT {f['ttft_p50_shift']:+.1%} E2E {f['e2e_p50_shift']:+.1%}")
PY
