"""Cut config/samples/itp-slice.csv out of the Microsoft ITP 2021 trace kept in ../shared (see PROVENANCE.md).

Jobs submitted from day 33 to day 36 of the trace (three days, all ten clusters, 3,080 jobs), with teams, priority
classes and checkpoint intervals assigned by itp-slice.mapping.yaml against org-quota.yaml, seed 0, written in
kuota's own csv format. Deterministic: running it again gives the same bytes (`--check` verifies the committed file).

    .venv/bin/python config/samples/make_itp_slice.py [--trace FILE] [--out FILE] [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from quota.loader import ConfigError, load_config_file
from sim.traces import TraceError, format_csv, load_mapping, read_trace

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TRACE = REPO.parent / "shared" / "data" / "traces" / "msft-itp-2021" / "itp_2021_all_clusters.csv"
CONFIG = HERE / "org-quota.yaml"
MAPPING = HERE / "itp-slice.mapping.yaml"
OUT = HERE / "itp-slice.csv"

DAY_MS = 86_400_000
START_DAY, END_DAY = 33, 36
SEED = 0


def make_slice(trace: Path = TRACE) -> str:
    """The slice as csv text."""
    jobs = read_trace(
        trace,
        "itp",
        load_mapping(MAPPING),
        load_config_file(CONFIG),
        seed=SEED,
        start_ms=START_DAY * DAY_MS,
        end_ms=END_DAY * DAY_MS,
    )
    return format_csv(jobs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE, help="itp_2021_all_clusters.csv")
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the slice")
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = parser.parse_args(argv)
    try:
        text = make_slice(args.trace)
    except (TraceError, ConfigError) as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out.name}: {'up to date' if same else 'differs from what the script makes'}")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out.name}: {text.count(chr(10)) - 1} jobs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
