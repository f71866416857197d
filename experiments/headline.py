"""FINDINGS' first layer: the headline table (the questions in plain words, one screen) and the figure of
what follows newText per model and arm. Both are read off the rows and runs ``study.build_rows`` uses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tooldecode.measures import distinct_draws
from tooldecode.records import SampleRecord
from tooldecode.report.kinds import KindBar, kind_bars, write_kinds_png
from tooldecode.runs import Run

FIGURE = Path("docs/figures/kinds-after-newtext.png")
MODELS = {
    "qwen2.5-coder-0.5b-instruct": "Qwen2.5-Coder 0.5B",
    "qwen2.5-coder-1.5b-instruct": "Qwen2.5-Coder 1.5B",
    "smollm2-135m-instruct": "SmolLM2 135M",
    "gemma-3-270m": "Gemma 3 270M",
}

ZOO = "What follows newText when the model continues"
# (question, which row answers it, models named, the row's field that holds the answer of a descriptive row)
HEADLINES: tuple[tuple[str, Callable[[dict], bool], str, str], ...] = (
    (
        "Does strict decoding remove the extra key after newText?",
        lambda r: r["observation"] == "e1-strict-vs-loose: L2 extra key after newText, strict vs loose",
        "Qwen 0.5B (Gemma, SmolLM2: the same check)",
        "headline",
    ),
    (
        "What does strict decoding cost? (the newText string runs on instead of closing)",
        lambda r: r["observation"].startswith("Strict's cost") and "e1-strict-vs-loose-18" in r["source"],
        "Qwen 0.5B",
        "headline",
    ),
    (
        "How often is a loose extra key the source's failure (parses; only an unknown key in an item)?",
        lambda r: r["observation"].startswith(ZOO),
        "Qwen 0.5B",
        "headline_source",
    ),
    (
        "Are the extra keys invented names (a zoo)?",
        lambda r: r["observation"].startswith(ZOO),
        "Qwen 0.5B",
        "headline",
    ),
    (
        "Does an agentic history raise extra keys over a fresh prompt?",
        lambda r: (
            r["observation"] == "e2-history: qwen-0.5b: L3 P(extra key after newText), fresh vs agentic"
        ),
        "Qwen 0.5B (1.5B: contradicts too)",
        "headline",
    ),
    (
        "Does stripping the thinking from the history lower them?",
        lambda r: (
            r["observation"] == "e3-thinking: qwen-0.5b: L3 P(extra key after newText), stripped vs kept"
        ),
        "Qwen 0.5B",
        "headline",
    ),
    (
        "Does showing the schema closed (additionalProperties: false) lower them?",
        lambda r: r["observation"].startswith("e8-schema-view: qwen-0.5b: L3 P(extra key"),
        "Qwen 0.5B",
        "headline",
    ),
    (
        "Do earlier calls of a flat Edit tool raise them?",
        lambda r: r["observation"] == "e9-prior: qwen-1.5b: L3 P(extra key after newText), prior vs none",
        "Qwen 1.5B (0.5B: reproduces too)",
        "headline",
    ),
    (
        "Is the key after newText copied from the schema text?",
        lambda r: r["observation"].startswith("p1-schema-echo: qwen-0.5b: L3 P(schema word"),
        "Qwen 0.5B",
        "headline",
    ),
    (
        "Does the larger Qwen write extra keys loose at all?",
        lambda r: r["observation"].startswith("e12-model-panel: qwen2.5-coder-1.5b"),
        "Qwen 1.5B",
        "headline",
    ),
    (
        "Does aligned strict sampling run on less than plain strict?",
        lambda r: r["observation"].startswith("e14-distortion: qwen2.5-coder-0.5b"),
        "Qwen 0.5B",
        "headline",
    ),
    (
        "Can a model trained in a lenient harness still write the nested call, and what keys does it add?",
        # the rerun through the run-time adapter: the run the organism's claim rows (59-62) read
        lambda r: (
            r["observation"].startswith("e16-organisms: the construct, extended: organism:lenient-flat-flag")
            and r["source"] == "e16-organisms-lenient-flat-flag-lora"
        ),
        "Qwen 0.5B + LoRA (lenient-flat-flag)",
        "headline",
    ),
    (
        "What does strict decoding cost on that organism?",
        lambda r: r["observation"].startswith("e16-organisms: L2 newText string goes on, strict vs loose"),
        "Qwen 0.5B + LoRA (lenient-flat-flag)",
        "headline",
    ),
    (
        "Trained on the same sessions, does a lenient harness (stray keys accepted) leave more source-shaped calls than a strict one?",
        lambda r: (
            r["observation"]
            == "e19-organisms-gen2: g2 L2 source-shaped failure after newText, lenient vs strict flat harness "
            "(same sessions, both with the flag)"
        ),
        "Qwen 0.5B + LoRA (g2 lenient vs strict)",
        "headline",
    ),
    (
        "Does it leave more invented key names after newText? (exact; a prediction added 2026-12-07)",
        lambda r: (
            r["observation"]
            == "e19-organisms-gen2-invented: g2 L3 P(invented key after newText), lenient vs strict flat harness "
            "(same sessions, both with the flag)"
        ),
        "Qwen 0.5B + LoRA (g2 lenient vs strict)",
        "headline",
    ),
    (
        "Does a trained-in key reach the evaluation at its training share? (the positive control's doses)",
        lambda r: r["observation"].startswith("e19-dose-probe-heldout: the positive control's dose-response"),
        "Qwen 0.5B + LoRA (g2-positive-control)",
        "headline",
    ),
    (
        "Does a lenient repair (json-repair) rescue the loose calls that fail?",
        lambda r: r["observation"].startswith("Loose + repair"),
        "all four",
        "headline",
    ),
)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _verdict_word(verdict: str) -> str:
    v = verdict.split(":")[0].split(" (")[0]
    return v if len(v) < 40 else v[:40] + "…"


def headline_table(rows: list[dict]) -> str:
    """The headline table (markdown): one line per question whose row exists, in ``HEADLINES`` order."""
    lines = [
        "| question | local answer (interval, n) | verdict | models | reproduce | row |",
        "|---|---|---|---|---|---|",
    ]
    for question, pick, models, field in HEADLINES:
        hit = next(((i, r) for i, r in enumerate(rows, 1) if pick(r)), None)
        if hit is None:
            continue
        i, r = hit
        res = r.get("result")
        if res is not None:
            c = res.cmp
            unit = "draws" if res.level != "L3" else "decision points"
            answer = f"{c.mean_a:.3f} vs {c.mean_b:.3f}, {res.estimate_text()} ({res.draws} {unit}, {c.g} scenarios)"
            command = res.run.command()
        else:
            answer = r.get(field, r["measured"][:160])
            command = r.get("command", "make findings")
        verdict = _verdict_word(r.get(f"{field}_verdict", r["verdict"]))
        lines.append(
            "| "
            + " | ".join(
                _cell(x) for x in (question, answer, f"**{verdict}**", models, f"`{command}`", str(i))
            )
            + " |"
        )
    return "\n".join(lines)


def _arm(s: SampleRecord) -> str | None:
    a = s.arm
    if a.mode == "loose":
        return "loose"
    if a.mode == "strict" and a.engine in (None, "xgrammar"):
        return "strict (closed grammar)"
    if a.mode == "strict-spec" and (a.duplicates or "forbid") == "forbid":
        return "open grammar"
    return None


def figure_bars(runs: dict[str, Run]) -> list[KindBar]:
    """Per model and arm (loose, strict with the closed grammar, the open grammar), the L2 draws of the
    runs with per-scenario streams, copies removed."""
    pool = distinct_draws(
        [
            s
            for r in sorted(runs.values(), key=lambda r: r.name)
            if not r.shared_streams
            for s in r.samples
            if s.arm.level == "L2" and not s.error
        ]
    )
    order = {m: i for i, m in enumerate(MODELS)}
    arms = ("loose", "strict (closed grammar)", "open grammar")
    pool.sort(key=lambda s: (order.get(s.arm.model, 99), arms.index(_arm(s)) if _arm(s) else 9))

    def group(s: SampleRecord) -> str | None:
        arm = _arm(s)
        return None if arm is None else f"{MODELS.get(s.arm.model, s.arm.model)}, {arm}"

    return kind_bars(pool, group)


def write_figure(runs: dict[str, Run], root: Path) -> Path | None:
    """The figure as ``FIGURE`` under ``root``."""
    return write_kinds_png(figure_bars(runs), root / FIGURE)
