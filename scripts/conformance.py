"""Run the official JSON-Schema-Test-Suite against the grammar builder in ``spec`` mode.

One or more draft folders (draft4, draft6, draft7, draft2019-09, draft2020-12); the draft is the
folder's name, given to each test schema as its ``$schema`` (the suite's older folders leave it out).

Each schema is compiled once; its Lark text is run by the ``lark`` package and by llguidance, its
GBNF by xgrammar, and its regex (when the schema is regular) by Python ``re``. Each test instance is
written in the grammar's canonical form (``serialize`` of the compiled IR; compact whitespace) and
the verdict of every engine is compared with the suite's expected result:

  pass           every engine agrees with the suite
  false accept   the instance is invalid and some engine accepted it
  false reject   the instance is valid and some engine rejected it
  unsupported    the schema was refused (UnsupportedSchemaError / GrammarError)

Usage: python scripts/conformance.py --suite DIR [--suite DIR ...] --out docs/conformance.md [--files a.json,b.json]
Exit status 1 when there is any false accept.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tooldecode.errors import SchemaError  # noqa: E402
from tooldecode.grammar import build_grammar, check, compile_schema  # noqa: E402
from tooldecode.grammar.framing import serialize_args  # noqa: E402
from tooldecode.grammar.gbnf import emit_gbnf  # noqa: E402
from tooldecode.grammar.lark import emit_lark  # noqa: E402
from tooldecode.grammar.regex import emit_regex  # noqa: E402

ENGINES = ("lark", "llguidance", "xgrammar", "re")
MASKBENCH_HEAD = "## MaskBench"
DRAFTS = ("draft2020-12", "draft2019-09", "draft7", "draft6", "draft4")
SCHEMA_URI = {
    "draft4": "http://json-schema.org/draft-04/schema#",
    "draft6": "http://json-schema.org/draft-06/schema#",
    "draft7": "http://json-schema.org/draft-07/schema#",
    "draft2019-09": "https://json-schema.org/draft/2019-09/schema",
    "draft2020-12": "https://json-schema.org/draft/2020-12/schema",
}
COMMAND = (
    "python scripts/conformance.py "
    + " ".join(f"--suite ../shared/data/json-schema-test-suite/tests/{d}" for d in DRAFTS)
    + " --out docs/conformance.md"
)


@dataclass
class FileResult:
    name: str
    tests: int = 0
    passed: int = 0
    false_accept: int = 0
    false_reject: int = 0
    unsupported: int = 0
    disagreements: int = 0
    notes: list[str] = field(default_factory=list)


def run_group(group: dict, res: FileResult, engines: tuple[str, ...], draft: str = "draft2020-12") -> None:
    tests = group["tests"]
    res.tests += len(tests)
    schema = group["schema"]
    if isinstance(schema, dict) and "$schema" not in schema and draft in SCHEMA_URI:
        schema = {"$schema": SCHEMA_URI[draft], **schema}
    try:
        sir = compile_schema(schema, mode="spec")
        g = build_grammar([("", sir)], wire="json", ws="compact", allow_empty=True)
        texts = {"lark": emit_lark(g), "gbnf": emit_gbnf(g)}
        try:
            texts["regex"] = emit_regex(g)
        except SchemaError:
            texts["regex"] = None
        for eng in engines:
            if check.FORMAT_OF[eng] == "regex" and texts["regex"] is None:
                continue
            check.validate(eng, texts[check.FORMAT_OF[eng]])
    except (SchemaError, RecursionError) as e:
        res.unsupported += len(tests)
        res.notes.append(f"{group['description']}: {str(e)[:140]}")
        return
    except check.EngineError as e:
        # an engine refused our text: counts against us as false rejects of valid and passes of invalid
        # would hide the bug, so report it loudly as unsupported with the engine message
        res.unsupported += len(tests)
        res.notes.append(f"ENGINE REFUSED ({group['description']}): {str(e)[:160]}")
        return
    for t in tests:
        text = serialize_args(sir, t["data"], wire="json", ws="compact", ws_max=None)
        verdicts = {}
        for eng in engines:
            fmt = check.FORMAT_OF[eng]
            if texts[fmt] is None:
                continue
            try:
                verdicts[eng] = check.accepts(eng, texts[fmt], text)
            except check.EngineError as e:
                res.notes.append(f"ENGINE ERROR {eng}: {str(e)[:160]}")
                verdicts[eng] = False
        if len(set(verdicts.values())) > 1:
            res.disagreements += 1
        if t["valid"]:
            if all(verdicts.values()):
                res.passed += 1
            else:
                res.false_reject += 1
        else:
            if any(verdicts.values()):
                res.false_accept += 1
                res.notes.append(
                    f"FALSE ACCEPT {group['description']} / {t['description']}: {text[:80]} {verdicts}"
                )
            else:
                res.passed += 1


def run(suite: Path, files: list[str] | None, engines: tuple[str, ...]) -> list[FileResult]:
    out = []
    paths = sorted(p for p in suite.glob("*.json") if files is None or p.name in files)
    for p in paths:
        res = FileResult(p.name)
        for group in json.loads(p.read_text(encoding="utf-8")):
            run_group(group, res, engines, suite.name)
        out.append(res)
    return out


def _total(results: list[FileResult]) -> FileResult:
    tot = FileResult("total")
    for r in results:
        tot.tests += r.tests
        tot.passed += r.passed
        tot.false_accept += r.false_accept
        tot.false_reject += r.false_reject
        tot.unsupported += r.unsupported
        tot.disagreements += r.disagreements
    return tot


def table(suites: list[tuple[str, list[FileResult]]], seconds: float, engines: tuple[str, ...]) -> str:
    lines = [
        "# JSON-Schema-Test-Suite conformance (`spec` mode)",
        "",
        "Generated by (`make conformance`):",
        "",
        "```",
        COMMAND,
        "```",
        "",
        f"Engines: {', '.join(engines)} (each instance in the grammar's canonical form, compact whitespace). "
        "A test passes when every engine agrees with the suite; a false accept is an invalid instance that "
        "any engine accepted; a false reject is a valid instance that any engine rejected; unsupported "
        "tests belong to schemas the builder refuses with a one-line error.",
        "",
        "Only the required tests (the files at the top of each draft folder) are run; `optional/` is not. "
        "Each test schema gets its folder's draft as `$schema` (the older folders leave it out) and is "
        "translated into draft 2020-12 (see [grammar](grammar.md#dialects)). "
        "The canonical form is the one `serialize_call` writes: keys in the schema's declared order (extra "
        "keys after them), integral numbers without a fraction, other numbers without an exponent, strings "
        "with short escapes. Unsupported schemas fail with the keyword and its JSON pointer; the main groups "
        "are `$dynamicRef`/`$recursiveRef`, remote references (the suite's `remotes/` folder is not available "
        "here) and fractional `multipleOf` values with no integer multiple. Narrowed renderings (see "
        "[grammar](grammar.md#narrowed-renderings): `uniqueItems` over unbounded items as at most one item, "
        "fractional `multipleOf` as integers, negations that leave out an open object's extra keys) are "
        "sound, so their cost shows as false rejects, never as false accepts.",
        "",
        "| draft | tests | pass | pass % | false accept | false reject | unsupported | engine disagreements |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, results in suites:
        t = _total(results)
        lines.append(
            f"| {name} | {t.tests} | {t.passed} | {100 * t.passed / max(t.tests, 1):.1f}% | {t.false_accept} | "
            f"{t.false_reject} | {t.unsupported} | {t.disagreements} |"
        )
    for name, results in suites:
        tot = _total(results)
        lines += [
            "",
            f"## {name}",
            "",
            f"**Total: {tot.tests} tests, {tot.passed} pass ({100 * tot.passed / max(tot.tests, 1):.1f}%), "
            f"{tot.false_accept} false accepts, {tot.false_reject} false rejects, {tot.unsupported} unsupported, "
            f"{tot.disagreements} engine disagreements**.",
            "",
            "| file | tests | pass | false accept | false reject | unsupported |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in results:
            lines.append(
                f"| {r.name} | {r.tests} | {r.passed} | {r.false_accept} | {r.false_reject} | {r.unsupported} |"
            )
        lines.append(
            f"| **total** | **{tot.tests}** | **{tot.passed}** | **{tot.false_accept}** | "
            f"**{tot.false_reject}** | **{tot.unsupported}** |"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--suite",
        required=True,
        type=Path,
        action="append",
        help="a draft folder of the test suite (repeatable)",
    )
    ap.add_argument("--out", type=Path, help="markdown file for the table (default: stdout)")
    ap.add_argument("--files", help="comma-separated file names to run (default: all in the folder)")
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated engines")
    ap.add_argument("--notes", action="store_true", help="print per-group notes (refusals, false accepts)")
    args = ap.parse_args(argv)
    for suite in args.suite:
        if not suite.is_dir():
            print(f"conformance: suite folder {suite} not found", file=sys.stderr)
            return 2
    engines = tuple(e for e in args.engines.split(",") if e)
    t0 = time.time()
    files = args.files.split(",") if args.files else None
    suites = [(suite.name, run(suite, files, engines)) for suite in args.suite]
    results = [r for _, rs in suites for r in rs]
    text = table(suites, time.time() - t0, engines)
    if args.out:
        old = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        keep = old[old.index(MASKBENCH_HEAD) :] if MASKBENCH_HEAD in old else ""  # written by maskbench.py
        args.out.write_text(text + ("\n" + keep if keep else ""), encoding="utf-8")
    print(text)
    if args.notes:
        for r in results:
            for n in r.notes:
                print(f"{r.name}: {n}")
    return 1 if any(r.false_accept for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
