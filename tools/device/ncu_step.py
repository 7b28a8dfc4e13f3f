#!/usr/bin/env python3
"""Per-kernel durations of one decode step from ncu CSV output, optionally A against B.

Make the CSV on the GPU machine (kernels serialized, caches kept):
  ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
      --launch-skip 400 --launch-count 130 env DELTASPEC_HIP_PDL=0 \
      deltaspec bench decode --model l8.gguf --backend hip:cuda -n 8 --bw-mib 64 > a.csv
(l8.gguf: `deltaspec synth --preset qwen3.8-27b --layers 8 --quant iq4_xs`; 130 launches cover one
8-layer step.) Then here:  tools/device/ncu_step.py a.csv [b.csv]
Prints each kernel's launch count and mean duration (µs) per file, and the sum of all launches.
"""
import csv
import sys
from collections import OrderedDict


def load(path):
    """(kernel name, duration in µs) of every profiled launch in an ncu --csv file."""
    out = []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            # Data rows start with the launch ID; the metric value is the last column (ns).
            if len(row) > 10 and row[0].isdigit():
                out.append((row[4], float(row[-1].replace(",", "")) / 1000.0))
    return out


def main(paths):
    runs = [load(p) for p in paths]
    table = OrderedDict()
    for i, run in enumerate(runs):
        for name, us in run:
            table.setdefault(name, [[] for _ in runs])[i].append(us)
    head = "".join(f" {p[-24:]:>26}" for p in paths)
    print(f"{'kernel':40}{head}")
    for name, per in table.items():
        cells = "".join(
            f" {len(v):4d} x {sum(v) / len(v):9.2f} us" if v else f" {'-':>26}" for v in per
        )
        print(f"{name[:40]:40}{cells}")
    sums = "".join(f" {sum(us for _, us in run):23.1f} us" for run in runs)
    print(f"{'sum of launches':40}{sums}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
