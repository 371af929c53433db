#!/usr/bin/env python3
"""Summarises scripts/w3_ab.sh's output: per configuration the median jobs/s and CPU per
run, and, against the base configuration (the first argument after the file, default the
first name seen), the median and mean of the per-round ratios with 95% bootstrap intervals.

    scripts/w3_ab_summary.py OUT [BASE]
"""
import random
import statistics
import sys


def interval(values, stat, draws=4000):
    """The 2.5th and 97.5th percentiles of `stat` over resamples of `values`."""
    rng = random.Random(1)
    stats = sorted(stat(rng.choices(values, k=len(values))) for _ in range(draws))
    return stats[int(draws * 0.025)], stats[int(draws * 0.975) - 1]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rounds, names = {}, []
    with open(sys.argv[1]) as out:
        for line in out:
            fields = line.split()
            if len(fields) < 5:
                continue
            round_, name, rate, user, system = fields[:5]
            rounds.setdefault(round_, {})[name] = (float(rate), float(user) + float(system))
            if name not in names:
                names.append(name)
    base = sys.argv[2] if len(sys.argv) > 2 else names[0]
    print(f"{len(rounds)} rounds; ratios to {base}")
    for name in names:
        runs = [r[name] for r in rounds.values() if name in r]
        line = (f"{name}: {statistics.median(rate for rate, _ in runs):,.0f} jobs/s, "
                f"CPU {statistics.median(cpu for _, cpu in runs):.2f} s")
        ratios = [r[name][0] / r[base][0] for r in rounds.values() if name in r and base in r]
        if name != base and ratios:
            low, high = interval(ratios, statistics.median)
            mlow, mhigh = interval(ratios, statistics.mean)
            line += (f"; ratio median {statistics.median(ratios):.3f} ({low:.3f}-{high:.3f}),"
                     f" mean {statistics.mean(ratios):.3f} ({mlow:.3f}-{mhigh:.3f}),"
                     f" {len(ratios)} rounds")
        print(line)


if __name__ == "__main__":
    main()
