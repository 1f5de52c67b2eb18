#!/usr/bin/env bash
# Runs a command while nvidia-smi samples power, clocks, throttle reasons and temperatures every
# 50 ms, then prints the samples folded into half-second lines next to the command's output
# lines, each stamped with the time it was printed: to see whether a slow measurement
# (docs/design.md, "Swap-AB decode") coincides with a lower SM clock, a power cap or a thermal event.
#
#   bench/tools/smi_trace.sh OUTDIR build/bench/moegemm-bench --rounds 3 --only dsv3ep8-fc1-decode128
#
# OUTDIR receives smi.csv (the raw samples) and command.log (the command's output, stamped);
# for moegemm-bench, smi_rows.py then prints each row's mean power and SM clock.
set -u
out="$1"; shift
mkdir -p "$out"
nvidia-smi --query-gpu=timestamp,power.draw,power.limit,clocks.sm,clocks.mem,clocks_event_reasons.active,temperature.gpu,temperature.memory \
  --format=csv,nounits -lms 50 >"$out/smi.csv" 2>&1 &
smi=$!
sleep 0.5
"$@" 2>&1 | while IFS= read -r line; do echo "$(date +%H:%M:%S.%N | cut -c1-12) $line"; done >"$out/command.log"
status=${PIPESTATUS[0]}
kill "$smi" 2>/dev/null
python3 - "$out/smi.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
data = [r for r in rows[1:] if len(r) >= 8]
for i in range(0, len(data), 10):
    chunk = data[i:i + 10]
    try:
        power = sum(float(r[1]) for r in chunk) / len(chunk)
        sm = sum(float(r[3]) for r in chunk) / len(chunk)
        mem = sum(float(r[4]) for r in chunk) / len(chunk)
    except ValueError:
        continue
    reasons = sorted(set(r[5].strip() for r in chunk))
    print(f"{chunk[0][0].split()[-1][:12]}  {power:5.0f} W  sm {sm:5.0f} MHz  mem {mem:5.0f} MHz"
          f"  reasons {' '.join(reasons)}  gpu {chunk[-1][6].strip()} C  hbm {chunk[-1][7].strip()} C")
PY
cat "$out/command.log"
# Each bench row's power and clock (bench/tools/smi_rows.py).
python3 "$(dirname "$0")/smi_rows.py" "$out"
exit "$status"
