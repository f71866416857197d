"""json-repair vs the project's own lenient repairs on the committed runs, per model.

    .venv/bin/python experiments/e15_repair.py [runs/e1-strict-vs-loose-18 ...]

Reads every committed run's raw samples (never writes into runs/), repairs each loose call both ways and
prints, per model, how many loose calls failing strict validation each rescues (valid, payload
byte-correct) and how many it turns into a valid-looking call with a cut or wrong payload (silent
corruption), next to strict decoding's valid + payload-correct rate on the same runs. Wilson 95%
intervals over samples (samples of one scenario are not independent: read them as descriptive).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tooldecode.repair import (
    JSON_REPAIR,
    format_json_repair,
    json_repair_row,
    json_repair_summary,
    repair_record,
)
from tooldecode.runs import RunStore, sample_of


def committed_runs() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "runs/*/samples.jsonl"], capture_output=True, text=True, check=True
    )
    return sorted(Path(p).parent for p in out.stdout.split())


def main(runs: list[Path]) -> None:
    rows = []
    for run in runs:
        store = RunStore.open(run)
        tools: dict = {}
        for record in (sample_of(d, tools) for d in store.sample_records()):
            row = repair_record(record, store.manifest)
            if "skipped" not in row:
                row[JSON_REPAIR] = json_repair_row(record, store.manifest)
            rows.append(row)
    print(f"runs: {', '.join(r.name for r in runs)}\n")
    print(format_json_repair(json_repair_summary(rows)))


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]] or committed_runs())
