"""`make demo`: the finding in minutes. After the edit call's ``newText``, does the model invent a key,
does strict decoding remove it, and what does strict cost?

A few corpus scenarios at L2 (the model samples right after the gold ``newText``: conditioning
``gold-prefix``), loose vs strict, on one model: an organism where one is given (``--model
organism:lenient-flat-flag@qwen2.5-coder-0.5b-instruct``, docs/organisms.md), the embedded default model
otherwise. It prints at most 15 lines (what the model wrote after ``newText``, invented keys loose vs
strict with Wilson 95% intervals, strict's cost, where the report is) and writes the report
(``out/demo/report/report.html``), which opens with the same answer.
"""

from __future__ import annotations

import argparse
import html
import json
import logging
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tooldecode.models import DEFAULT_MODEL  # noqa: E402

SPEC = """name = "demo"
description = "L2 (sampled after the gold newText), loose vs strict, on {model}"
models = ["{model}"]
backend = "llamacpp"
scenarios = "all"
max_scenarios = {scenarios}
n = {n}
seeds = [0]
temperatures = [1.0]
max_new_tokens = {tokens}
modes = ["loose", "strict"]
engine = "xgrammar"
batch_size = {n}

[variant]
history = ["agentic"]
thinking = [true]
toolset = ["nested"]
conditioning = ["gold-prefix"]
"""


def _rate(k: int, n: int) -> str:
    from tooldecode.stats.intervals import wilson

    r = wilson(k, n)
    return f"{k}/{n} = {100 * r.rate:.0f}% [{100 * r.lo:.0f}, {100 * r.hi:.0f}]"


ITEM_KEYS = ("oldText", "newText")  # the keys an edits[] item already has
SCHEMA_WORDS = ("required", "type", "properties", "items", "description", "additionalProperties")


def _after(text: str) -> tuple[str, str | None]:
    """What a sample wrote right after newText: (a short label, the extra key's kind or None)."""
    m = re.match(r'\s*"\s*,\s*"([^"]{1,40})"', text)
    if m:
        key = m.group(1)
        kind = "repeated" if key in ITEM_KEYS else "schema word" if key in SCHEMA_WORDS else "invented"
        return f'{kind} key "{key}"', kind
    if re.match(r'\s*"\s*\}', text):
        return "closed the edit", None
    if not text.lstrip().startswith('"'):
        return "kept writing newText", None
    return "something else: " + json.dumps(text.strip()[:24]), None


def answer(run: Path, model: str, seconds: float) -> list[str]:
    """The demo's lines, from the run's samples and verdicts."""
    samples = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines() if x.strip()]
    verdicts = {}
    for f in sorted(run.glob("verdicts-*.jsonl")):
        for x in f.read_text().splitlines():
            v = json.loads(x)
            verdicts[v["key"]] = v
    by_mode: dict[str, list[dict]] = {"loose": [], "strict": []}
    for s in samples:
        if not s.get("error") and s["arm"]["mode"] in by_mode:
            by_mode[s["arm"]["mode"]].append(s)
    n = {m: len(xs) for m, xs in by_mode.items()}
    lines = [
        f"model {model}: {n['loose']} loose and {n['strict']} strict samples at L2 "
        f"(sampled right after the gold newText), {seconds / 60:.1f} min"
    ]
    wrote = Counter(_after(s["text"])[0] for s in by_mode["loose"])
    top = "; ".join(f"{k} {c}/{n['loose']}" for k, c in wrote.most_common(4))
    lines.append(f"after newText the model wrote (loose): {top}")
    extra = {m: [_after(s["text"])[1] for s in xs] for m, xs in by_mode.items()}
    for m in ("loose", "strict"):
        k = sum(1 for x in extra[m] if x is not None)
        kinds = Counter(x for x in extra[m] if x is not None)
        detail = f" ({', '.join(f'{c} {kind}' for kind, c in kinds.most_common())})" if kinds else ""
        lines.append(f"an extra key after newText, {m + ':':7s} {_rate(k, n[m])}{detail}")
    steps = [x for s in by_mode["strict"] for x in (s.get("mask_removed") or []) if x is not None]
    acted = [x for x in steps if x > 0.01]
    if steps:
        mean = sum(acted) / len(acted) if acted else 0.0
        lines.append(
            f"strict's cost: the mask removed over 1% of the probability at {len(acted)}/{len(steps)} tokens "
            f"({100 * len(acted) / len(steps):.1f}%), {100 * mean:.0f}% on average there"
        )
    valid = {
        m: sum(1 for s in xs if verdicts.get(s["key"], {}).get("verdict") == "valid")
        for m, xs in by_mode.items()
    }
    correct = {
        m: sum(1 for s in xs if (verdicts.get(s["key"], {}).get("payload") or {}).get("file_correct"))
        for m, xs in by_mode.items()
    }
    lines.append(
        f"valid calls: strict {_rate(valid['strict'], n['strict'])}, loose {_rate(valid['loose'], n['loose'])}"
    )
    lines.append(
        f"the edit gives the expected file: strict {correct['strict']}/{n['strict']}, loose {correct['loose']}/{n['loose']}"
    )
    return lines


def lead_report(page: Path, lines: list[str]) -> None:
    """Open the HTML report with the demo's answer."""
    text = page.read_text(encoding="utf-8")
    block = (
        '<section class="answer"><h1>The answer</h1><pre>'
        + html.escape("\n".join(lines))
        + "</pre></section>"
    )
    m = re.search(r"<body[^>]*>", text)
    at = m.end() if m else 0
    page.write_text(text[:at] + block + text[at:], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model", default=DEFAULT_MODEL, help="a model id, or organism:NAME@BASE where one is built"
    )
    ap.add_argument("--scenarios", type=int, default=6, help="corpus scenarios (spread over the corpus)")
    ap.add_argument("-n", type=int, default=8, help="samples per scenario and mode")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--out", type=Path, default=Path("out") / "demo")
    ap.add_argument("--channel-check", action="store_true", help="first compare llama.cpp with transformers")
    args = ap.parse_args(argv)
    from tooldecode.experiments.runner import run_spec
    from tooldecode.experiments.spec import load_spec
    from tooldecode.report import report

    if args.channel_check:
        from tooldecode.trial import channel_agreement

        print("\n".join(channel_agreement(args.model, n_tokens=16).lines()))
    logging.getLogger("tooldecode.progress").setLevel(logging.WARNING)  # the answer only
    args.out.mkdir(parents=True, exist_ok=True)
    spec_file = args.out / "demo.toml"
    spec_file.write_text(
        SPEC.format(model=args.model, scenarios=args.scenarios, n=args.n, tokens=args.max_new_tokens)
    )
    t0 = time.monotonic()
    run = args.out / "run"
    run_spec(load_spec(spec_file), run)
    paths = report([run], args.out / "report")
    lines = answer(run, args.model, time.monotonic() - t0)
    lead_report(Path(paths["html"]), lines)
    lines.append(f"report: {Path(paths['html']).resolve()}")
    print("\n".join(lines[:15]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
