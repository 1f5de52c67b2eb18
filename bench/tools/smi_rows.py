#!/usr/bin/env python3
"""Power and SM clock of each moegemm-bench row, from a bench/tools/smi_trace.sh directory.

    bench/tools/smi_rows.py TRACEDIR [WINDOW_S]

For every row line of command.log ("... libmoegemm[auto]... 229.7 µs ..."), averages the
nvidia-smi samples of smi.csv taken in the WINDOW_S seconds (default 0.4) before the line was
printed, which is the row's timed part (the bench prints a row when its measurement ends), and
prints the row's time beside the mean power, SM clock and the throttle reasons seen
(0x4: SW power cap). docs/design.md ("Swap-AB decode") reads the decode rows this way.
"""
import csv
import os
import re
import sys


def seconds(stamp):
    """Seconds since midnight of an HH:MM:SS.fff stamp (the last field of `stamp`)."""
    hours, minutes, secs = stamp.strip().split()[-1].split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(secs)


def main():
    trace = sys.argv[1]
    window = float(sys.argv[2]) if len(sys.argv) > 2 else 0.4
    samples = []
    with open(os.path.join(trace, "smi.csv")) as f:
        for row in list(csv.reader(f))[1:]:
            try:
                samples.append((seconds(row[0]), float(row[1]), float(row[3]), row[5].strip()))
            except (IndexError, ValueError):
                continue  # a header repeated or a line cut short when the sampler stopped
    row_line = re.compile(r"^(\S+) (?:\[\d+/\d+\] )?(\S+)(?: \(round (\d+)/\d+\))?: (\S+)\.\.\. ([\d.]+) µs")
    print(f"{'workload':26s} {'round':>5s} {'row':22s} {'µs':>8s} {'W':>5s} {'SM MHz':>7s}  reasons")
    with open(os.path.join(trace, "command.log")) as f:
        for line in f:
            m = row_line.match(line)
            if not m:
                continue
            end = seconds(m.group(1))
            seg = [s for s in samples if end - window < s[0] <= end]
            if not seg:
                continue
            power = sum(s[1] for s in seg) / len(seg)
            clock = sum(s[2] for s in seg) / len(seg)
            reasons = " ".join(sorted({s[3] for s in seg}))
            print(f"{m.group(2):26s} {m.group(3) or '1':>5s} {m.group(4):22s} {m.group(5):>8s}"
                  f" {power:5.0f} {clock:7.0f}  {reasons}")


if __name__ == "__main__":
    main()
