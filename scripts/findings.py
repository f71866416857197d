"""Write FINDINGS.md from the runs in runs/ (no model is loaded; verdicts are computed if missing)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tooldecode.findings import build_findings, write_findings

PREAMBLE = """
Each row is one observation of the background brief, measured on local models from the committed runs in
`runs/` (raw samples included). Rates are `k/n = rate% [Wilson 95% interval]`; differences carry a 95%
interval (paired cluster bootstrap over scenarios for sampled rates, paired t over scenarios for probe
values); "L2" is sampling after the gold newText was forced, "L3" the exact probe (see docs/experiments.md).
A verdict of "reproduces" needs the interval to exclude zero in the claimed direction. Regenerate with
`python scripts/findings.py` after `make experiments`.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", default="runs")
    ap.add_argument("--out", default="FINDINGS.md")
    args = ap.parse_args()
    rows = build_findings(Path(args.runs))
    path = write_findings(rows, Path(args.out), preamble=PREAMBLE)
    print(f"wrote {path} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
