"""MaskBench (guidance-ai/jsonschemabench) soundness and coverage of the strict grammar builder.

For every schema of ``maskbench/data`` in a local clone: render it in strict mode, then run each test
instance through independent engines (xgrammar on the GBNF, llguidance on the Lark text) in two
serializations (the grammar's canonical compact form and the ``", "``/``": "`` form under the
``bounded`` whitespace policy). The instance's ground truth is the suite's label and ``jsonschema``
on ``strictify(schema)`` (strict mode closes objects, so a valid instance with extra keys is outside
its promise):

  false accept    an engine accepted a text of an instance that is labelled invalid or is invalid
                  against the strictified schema
  valid accepted  instances valid by label and against the strictified schema that every engine
                  accepted in every serialization

The same instances (``json.dumps``, compact and default separators) are run through llama.cpp's
``json_schema_to_gbnf`` (its GBNF checked by xgrammar) and xgrammar's own JSON Schema compiler as
anchors. The data is not part of this repository (no license file); pass a clone's folder.

Usage: python scripts/maskbench.py --jsb DIR [--limit N] [--seed S] [--out FILE] [--timeout S]
       [--engines E,...] [--save FILE.json] [--load FILE.json ...]

``--save`` writes the per-split counts as JSON; ``--load`` merges saved counts (e.g. the anchors and
``tooldecode`` measured in separate runs) into one table (later files win per split and engine).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tooldecode.errors import SchemaError  # noqa: E402
from tooldecode.grammar import build_grammar, check, compile_schema, strictify  # noqa: E402
from tooldecode.grammar.framing import serialize_args  # noqa: E402
from tooldecode.grammar.gbnf import emit_gbnf  # noqa: E402
from tooldecode.grammar.lark import emit_lark  # noqa: E402


def split_of(path: Path) -> str:
    name = path.name
    if "---" in name:
        return name.split("---", 1)[0]
    stem = re.sub(r"_\d+\.json$", "", name)
    return "BFCL" if stem.startswith("BFCL") else stem


@dataclass
class Row:
    schemas: int = 0
    rendered: int = 0
    refused: Counter = field(default_factory=Counter)
    valid: int = 0
    valid_accepted: int = 0
    invalid: int = 0
    false_accepts: int = 0
    # labelled invalid only because of a format strict mode does not assert (an annotation, with a
    # warning on the result): outside strict mode's promise, counted apart from false accepts
    format_only: int = 0
    format_only_accepted: int = 0
    examples: list[str] = field(default_factory=list)


def _reason(e: BaseException) -> str:
    kw = getattr(e, "keyword", None)
    if kw:
        return f"'{kw}'"
    if isinstance(e, RecursionError):
        return "too deep"
    msg = str(e)
    return msg.split(";")[0][:60]


def oracle_schema(schema: Any) -> Any:
    """``schema`` for the ``jsonschema`` oracle: an empty ``patternProperties`` pattern (which matches every
    name) written as ``(?:)``. jsonschema 4.26 joins the patterns with ``|`` and tests the joined
    string's truth before searching, so a lone ``""`` pattern matches nothing when it decides which
    properties are additional (``_utils.find_additional_properties``)."""
    if isinstance(schema, list):
        return [oracle_schema(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: oracle_schema(v) for k, v in schema.items()}
    pp = out.get("patternProperties")
    if isinstance(pp, dict) and "" in pp:
        out["patternProperties"] = {("(?:)" if k == "" else k): v for k, v in pp.items()}
    return out


def same_text(text: str, data: Any) -> bool:
    """Whether ``text`` writes ``data`` itself, numbers' integer/float form included (``1.0`` is not ``1``)."""
    return json.dumps(json.loads(text), sort_keys=True) == json.dumps(data, sort_keys=True)


_UNASSERTED = re.compile(r"format '([^']+)' at ")


def _format_only(validator: Any, data: Any, unasserted: set[str]) -> bool:
    """Whether every error of ``data`` under format-checking ``validator`` is a top-level ``format`` error
    of a format strict mode leaves unasserted (an annotation by design)."""
    errors = list(validator.iter_errors(data)) if validator is not None else []
    return bool(errors) and all(e.validator == "format" and e.validator_value in unasserted for e in errors)


def _texts(sir: Any, data: Any, ws: str, truth: bool) -> list[str]:
    """The texts of one instance checked under whitespace policy ``ws``: the canonical form (for an
    invalid instance only when it writes the instance itself: it writes 12345.0 as 12345, which
    draft-04 tells apart), and for an invalid instance its own ``json.dumps`` text too."""
    texts = []
    try:
        canon = serialize_args(sir, data, wire="json", ws=ws, ws_max=None)
        if truth or same_text(canon, data):
            texts.append(canon)
    except Exception:  # noqa: BLE001 -- an invalid value may have no canonical text
        pass
    if not truth:
        sep = (",", ":") if ws == "compact" else (", ", ": ")
        texts.append(json.dumps(data, separators=sep, ensure_ascii=False))
    return texts


def _ours(schema: Any, tests: list[dict], row: Row, name: str) -> None:
    sir = compile_schema(schema, mode="strict")
    grammars = {}
    for ws in ("compact", "bounded"):
        g = build_grammar([("", sir)], wire="json", ws=ws, allow_empty=True)
        grammars[ws] = (emit_gbnf(g), emit_lark(g))
    row.rendered += 1
    try:
        import jsonschema

        strict = oracle_schema(strictify(schema))
        strict_validator: Any = jsonschema.Draft202012Validator(strict)
        format_validator: Any = jsonschema.Draft202012Validator(
            strict, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
    except Exception:  # noqa: BLE001 -- a schema jsonschema cannot load: labels only
        strict_validator = format_validator = None
    unasserted = {m.group(1) for w in sir.warnings for m in _UNASSERTED.finditer(w)}
    for t in tests:
        data = t["data"]
        ok_strict = strict_validator.is_valid(data) if strict_validator is not None else t["valid"]
        truth = bool(t["valid"]) and ok_strict
        verdicts = []
        for ws, (gbnf, lark_text) in grammars.items():
            texts = _texts(sir, data, ws, truth)
            for text in texts:
                for eng, gtext in (("xgrammar", gbnf), ("llguidance", lark_text)):
                    try:
                        verdicts.append(check.accepts(eng, gtext, text))
                    except check.EngineError:
                        verdicts.append(False)
        if truth:
            row.valid += 1
            if verdicts and all(verdicts):
                row.valid_accepted += 1
        elif ok_strict and _format_only(format_validator, data, unasserted):
            row.format_only += 1
            row.format_only_accepted += any(verdicts)
        else:
            row.invalid += 1
            if any(verdicts):
                row.false_accepts += 1
                if len(row.examples) < 20:
                    row.examples.append(f"{name}: {json.dumps(data)[:300]}")


def _anchor(kind: str, schema: Any, tests: list[dict], row: Row) -> None:
    import xgrammar
    from xgrammar.testing import _is_grammar_accept_string

    if kind == "llama.cpp":
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        g = xgrammar.Grammar.from_ebnf(json_schema_to_gbnf(json.dumps(schema)), root_rule_name="root")
    else:
        g = xgrammar.Grammar.from_json_schema(json.dumps(schema), strict_mode=True)
    row.rendered += 1
    for t in tests:
        texts = [json.dumps(t["data"], separators=(",", ":")), json.dumps(t["data"])]
        verdicts = [bool(_is_grammar_accept_string(g, x)) for x in texts]
        if t["valid"]:
            row.valid += 1
            row.valid_accepted += all(verdicts)
        else:
            row.invalid += 1
            row.false_accepts += any(verdicts)


ENGINES = ("tooldecode", "llama.cpp", "xgrammar")
SECTION = "## MaskBench"


def _warm(engines: tuple[str, ...]) -> None:
    import jsonschema  # noqa: F401
    import xgrammar  # noqa: F401

    if "tooldecode" in engines:
        _one("tooldecode", {"type": "object", "properties": {"a": {"type": "string"}}}, [], "warm-up")
    if "llama.cpp" in engines:
        import llama_cpp.llama_grammar  # noqa: F401


def _one(kind: str, schema: Any, tests: list[dict], name: str) -> Row:
    row = Row()
    try:
        if kind == "tooldecode":
            _ours(schema, tests, row, name)
        else:
            _anchor(kind, schema, tests, row)
    except (SchemaError, RecursionError) as e:
        row.refused[_reason(e)] += 1
    except Exception as e:  # noqa: BLE001 -- an anchor engine's own failure: a refusal
        row.refused[type(e).__name__] += 1
    return row


def _isolated(kind: str, schema: Any, tests: list[dict], name: str, timeout: int) -> Row | None:
    """``_one`` in a forked child, killed after ``timeout`` seconds (an engine may not return to Python)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)

    def work() -> None:
        child.send(_one(kind, schema, tests, name))

    proc = ctx.Process(target=work, daemon=True)
    proc.start()
    child.close()
    try:
        if parent.poll(timeout):
            return parent.recv()
        return None
    except EOFError:  # the child died (e.g. an engine crashed): a refusal
        row = Row()
        row.refused["crash"] += 1
        return row
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()


def run(
    jsb: Path,
    limit: int | None,
    seed: int,
    timeout: int,
    engines: tuple[str, ...] = ENGINES,
    render_only: bool = False,
    splits: set[str] | None = None,
    save: Path | None = None,
) -> dict[str, dict[str, Row]]:
    data_dir = jsb / "maskbench" / "data"
    files = sorted(data_dir.glob("*.json"))
    by_split: dict[str, list[Path]] = defaultdict(list)
    for p in files:
        by_split[split_of(p)].append(p)
    rng = random.Random(seed)
    out: dict[str, dict[str, Row]] = {}
    _warm(engines)  # import the engines once, before the children are forked
    for split in sorted(by_split):
        if splits is not None and split not in splits:
            continue
        paths = by_split[split]
        if limit is not None and len(paths) > limit:
            paths = sorted(rng.sample(paths, limit))
        rows = {k: Row() for k in engines}
        for p in paths:
            try:
                doc = json.loads(p.read_text(encoding="utf-8"))
                schema, tests = doc["schema"], [] if render_only else doc.get("tests", [])
            except (OSError, UnicodeDecodeError, ValueError, KeyError) as e:
                print(f"maskbench: {p.name}: unreadable ({type(e).__name__}), skipped", file=sys.stderr)
                continue
            for kind, row in rows.items():
                row.schemas += 1
                part = _isolated(kind, schema, tests, p.name, timeout)
                if part is None:  # the engine did not return within the time limit (killed)
                    row.refused["timeout"] += 1
                    continue
                row.rendered += part.rendered
                row.refused.update(part.refused)
                row.valid += part.valid
                row.valid_accepted += part.valid_accepted
                row.invalid += part.invalid
                row.false_accepts += part.false_accepts
                row.format_only += part.format_only
                row.format_only_accepted += part.format_only_accepted
                row.examples.extend(part.examples[: max(0, 20 - len(row.examples))])
        out[split] = rows
        if save is not None:  # after every split: an interrupted run keeps the splits it finished
            save_rows(out, save)
        t = rows.get("tooldecode", Row())
        print(
            f"{split}: {t.rendered}/{t.schemas} rendered, {t.false_accepts} false accepts, "
            f"{t.valid_accepted}/{t.valid} valid accepted",
            file=sys.stderr,
        )
    return out


def save_rows(res: dict[str, dict[str, Row]], path: Path) -> None:
    """Per-split counts as JSON (``--save``)."""
    doc = {
        split: {
            kind: {**{k: v for k, v in vars(r).items() if k != "refused"}, "refused": dict(r.refused)}
            for kind, r in rows.items()
        }
        for split, rows in res.items()
    }
    path.write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")


def load_rows(paths: list[Path], into: dict[str, dict[str, Row]] | None = None) -> dict[str, dict[str, Row]]:
    """Merge saved counts (``--load``); a later file replaces an earlier one's (split, engine) row."""
    out = into if into is not None else {}
    for path in paths:
        for split, rows in json.loads(path.read_text(encoding="utf-8")).items():
            for kind, d in rows.items():
                r = Row(**{k: v for k, v in d.items() if k != "refused"})
                r.refused = Counter(d.get("refused", {}))
                out.setdefault(split, {})[kind] = r
    order = {k: i for i, k in enumerate(ENGINES)}
    return {
        split: dict(sorted(out[split].items(), key=lambda kv: order.get(kv[0], 99))) for split in sorted(out)
    }


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "–"


def table(res: dict[str, dict[str, Row]], command: str) -> str:
    lines = [
        "| split | engine | schemas | rendered | false accepts / invalid | valid accepted | invalid only by an "
        "unasserted format: accepted / all | refused (top reasons) |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    totals: dict[str, Row] = defaultdict(Row)
    for split, rows in res.items():
        for kind, r in rows.items():
            tot = totals[kind]
            tot.schemas += r.schemas
            tot.rendered += r.rendered
            tot.valid += r.valid
            tot.valid_accepted += r.valid_accepted
            tot.invalid += r.invalid
            tot.false_accepts += r.false_accepts
            tot.format_only += r.format_only
            tot.format_only_accepted += r.format_only_accepted
            tot.refused.update(r.refused)
            reasons = ", ".join(f"{k} {v}" for k, v in r.refused.most_common(3))
            lines.append(
                f"| {split} | {kind} | {r.schemas} | {r.rendered} ({_pct(r.rendered, r.schemas)}) | "
                f"{r.false_accepts} / {r.invalid} | {r.valid_accepted}/{r.valid} ({_pct(r.valid_accepted, r.valid)}) "
                f"| {r.format_only_accepted} / {r.format_only} | {reasons} |"
            )
    for kind, r in totals.items():
        reasons = ", ".join(f"{k} {v}" for k, v in r.refused.most_common(4))
        lines.append(
            f"| **all** | **{kind}** | {r.schemas} | {r.rendered} ({_pct(r.rendered, r.schemas)}) | "
            f"{r.false_accepts} / {r.invalid} | {r.valid_accepted}/{r.valid} ({_pct(r.valid_accepted, r.valid)}) "
            f"| {r.format_only_accepted} / {r.format_only} | {reasons} |"
        )
    return f"Generated by `{command}`.\n\n" + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jsb", type=Path, help="a clone of guidance-ai/jsonschemabench")
    ap.add_argument("--limit", type=int, default=None, help="schemas per split (a seeded random sample)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=30, help="seconds per schema and engine")
    ap.add_argument(
        "--engines", default=",".join(ENGINES), help="tooldecode and the anchors llama.cpp, xgrammar"
    )
    ap.add_argument("--splits", default="", help="only these splits (comma-separated; default: all)")
    ap.add_argument("--out", type=Path, help="write the markdown table here (default: stdout only)")
    ap.add_argument("--save", type=Path, help="write the per-split counts as JSON")
    ap.add_argument(
        "--render-only", action="store_true", help="count rendered / refused schemas only (no test instances)"
    )
    ap.add_argument(
        "--load",
        type=Path,
        nargs="*",
        default=[],
        help="merge saved counts (no schema is run when --jsb is absent)",
    )
    ap.add_argument(
        "--doc",
        type=Path,
        help="replace the '## MaskBench' section of this markdown file (e.g. docs/conformance.md) with the table",
    )
    ap.add_argument("--note", default="", help="a paragraph printed under the section heading (with --doc)")
    args = ap.parse_args(argv)
    if args.jsb is None and not args.load:
        ap.error("pass --jsb (a clone of jsonschemabench) or --load (saved counts)")
    if args.jsb is not None and not (args.jsb / "maskbench" / "data").is_dir():
        print(
            f"maskbench: {args.jsb}/maskbench/data not found; pass a clone of jsonschemabench",
            file=sys.stderr,
        )
        return 2
    t0 = time.time()
    engines = tuple(e for e in args.engines.split(",") if e)
    res = (
        run(
            args.jsb,
            args.limit,
            args.seed,
            args.timeout,
            engines,
            args.render_only,
            {x for x in args.splits.split(",") if x} or None,
            args.save,
        )
        if args.jsb is not None
        else {}
    )
    if args.save:
        save_rows(res, args.save)
    if args.load:
        res = load_rows(args.load + ([args.save] if args.save else []))
    cmd = (
        "python scripts/maskbench.py --jsb JSB_DIR"
        + (f" --limit {args.limit} --seed {args.seed}" if args.limit else "")
        + (" --render-only" if args.render_only else "")
    )
    text = table(res, cmd) + f"\n({time.time() - t0:.0f} s)\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    if args.doc:
        old = args.doc.read_text(encoding="utf-8") if args.doc.is_file() else ""
        head = old[: old.index(SECTION)].rstrip("\n") + "\n\n" if SECTION in old else old
        body = f"{SECTION}\n\n" + (args.note.strip() + "\n\n" if args.note else "") + text
        args.doc.write_text(head + body, encoding="utf-8")
    print(text)
    return (
        1
        if any(r.false_accepts for rows in res.values() for k, r in rows.items() if k == "tooldecode")
        else 0
    )


if __name__ == "__main__":
    sys.exit(main())
