"""``tooldecode repair RUN``: repair a run's calls the way a lenient harness does and account for the rescues."""

from __future__ import annotations

import argparse
import json

from tooldecode.cli.options import add_command, add_switch
from tooldecode.repair import (
    JSON_REPAIR,
    REPAIR_VERSION,
    REPAIRS,
    format_json_repair,
    format_rescue,
    json_repair_row,
    json_repair_summary,
    repair_record,
    rescue_summary,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "repair",
        _run,
        help="repair a run's calls like a lenient harness; write repaired-<version>.jsonl beside the samples",
        description="Score every raw sample strictly, repair it as a tolerant client would, write "
        f"repaired-{REPAIR_VERSION}.jsonl beside samples.jsonl (raw files are never rewritten) "
        "and print the rescue accounting.",
    )
    p.add_argument("run", help="run directory (runs/<name>)")
    p.add_argument(
        "--disable",
        action="append",
        default=[],
        choices=REPAIRS,
        metavar="REPAIR",
        help=f"switch a repair off (repeatable): {', '.join(REPAIRS)}",
    )
    add_switch(
        p,
        "--no-json-repair",
        "switch off the json-repair stage (the json-repair library run on each call's raw text, "
        "reported apart from the repairs above)",
    )
    add_switch(p, "--json", "print the accounting as JSON instead of Markdown")


def derived_name(disabled: list[str]) -> str:
    """File name of the repaired verdicts; switched-off repairs are part of the name."""
    suffix = "".join(f"-no-{k}" for k in (*REPAIRS, JSON_REPAIR) if k in disabled)
    return f"repaired-{REPAIR_VERSION}{suffix}.jsonl"


def _run(args: argparse.Namespace) -> int:
    from tooldecode.runs import RunStore, sample_of

    store = RunStore.open(args.run)
    manifest = store.manifest
    enabled = [k for k in REPAIRS if k not in args.disable]
    rows = []
    tools: dict = {}
    for record in (sample_of(d, tools) for d in store.sample_records()):
        row = repair_record(record, manifest, enabled=enabled)
        if not args.no_json_repair and "skipped" not in row:
            row[JSON_REPAIR] = json_repair_row(record, manifest)
        rows.append(row)
    disabled = args.disable + ([JSON_REPAIR] if args.no_json_repair else [])
    path = store.write_derived(derived_name(disabled), rows)
    summary = rescue_summary(rows)
    if not args.no_json_repair:
        summary[JSON_REPAIR] = json_repair_summary(rows)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(format_rescue(summary))
        if not args.no_json_repair:
            print("\n" + format_json_repair(summary[JSON_REPAIR]))
        print(f"\nwrote {path}")
    return 0
