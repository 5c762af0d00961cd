"""Write ``traces/sample.csv``: a small synthetic GPU-cluster trace in gpudock's canonical format.

    python scripts/make_sample_trace.py            # rewrites traces/sample.csv
    python scripts/make_sample_trace.py --check    # exit 1 if the file differs

Deterministic (a seeded ``random.Random``, standard library only): the same command
writes the same bytes on every machine, so the file in the repository can be checked.

400 jobs over about 12 hours in three queues, shaped like the public traces (see
docs/traces.md): durations log-normal (median about 20 minutes, a tail of many
hours, as in Philly), most jobs one GPU, a few whole nodes and two-node gangs, and
a fifth of the one-GPU jobs sharing a GPU (``gpu_fraction``, as in Alibaba PAI).
Arrivals come in bursts (a working-hours wave), so a 4x8 cluster queues and the
policies differ.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "traces" / "sample.csv"
SEED = 29
JOBS = 400
SPAN = 12 * 3600
QUEUES = (("research", 0.5), ("prod", 0.3), ("interns", 0.2))
GPUS = ((1, 0.62), (2, 0.14), (4, 0.12), (8, 0.09), (16, 0.03))


def pick(rng: random.Random, choices: tuple[tuple[object, float], ...]) -> object:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def rows() -> list[str]:
    rng = random.Random(SEED)
    lines = ["job_id,submit_time,duration,num_gpus,gpu_fraction,queue"]
    times = []
    for _ in range(JOBS):
        # a wave: more arrivals in the middle of the span than at its ends
        times.append(SPAN * (0.5 + 0.5 * math.sin(math.pi * (rng.random() - 0.5))))
    for number, submit in enumerate(sorted(times), start=1):
        gpus = int(pick(rng, GPUS))  # type: ignore[call-overload]
        duration = max(30, round(rng.lognormvariate(math.log(1200), 1.3)))
        fraction = ""
        if gpus == 1 and rng.random() < 0.2:
            fraction = rng.choice(("0.25", "0.5"))
        queue = pick(rng, QUEUES)
        lines.append(f"j{number:04d},{round(submit)},{duration},{gpus},{fraction},{queue}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    text = "\n".join(rows()) + "\n"
    if args.check:
        same = args.out.is_file() and args.out.read_text() == text
        verdict = "up to date" if same else "differs; run scripts/make_sample_trace.py"
        print(f"{args.out}: {verdict}")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out} ({JOBS} jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
