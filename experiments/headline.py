"""FINDINGS' first layer: the headline table (the questions in plain words, one screen) and the figure of
what follows newText per model and arm. Both are read off the rows and runs ``study.build_rows`` uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from experiments.study import row_keys
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


def _obs(observation: str) -> Callable[[dict], bool]:
    """The row whose observation is ``observation``."""
    return lambda r: r["observation"] == observation


@dataclass(frozen=True)
class Headline:
    """One question of the headline table.

    Attributes
    ----------
    question : str
        The question in plain words.
    pick : Callable[[dict], bool]
        Which FINDINGS row answers it (the first that matches).
    models : str
        The models the answer is about.
    field : str
        The row's field that holds the answer of a descriptive row.
    also : tuple of (str, Callable[[dict], bool])
        Rows that test the same question elsewhere (another model, another seed), each named by a label:
        their verdicts, read off their rows, stand beside the models.
    """

    question: str
    pick: Callable[[dict], bool]
    models: str
    field: str = "headline"
    also: tuple[tuple[str, Callable[[dict], bool]], ...] = ()


LENIENT_VS_STRICT = "lenient vs strict flat harness"
SEED_1 = ", second seed of the lenient organism"
SAMPLED = "e19-organisms-gen2: g2 L2 source-shaped failure after newText, " + LENIENT_VS_STRICT
INVENTED = "e19-organisms-gen2-invented: g2 L3 P(invented key after newText), " + LENIENT_VS_STRICT
SAME_SESSIONS = " (same sessions, both with the flag)"
HEADLINES: tuple[Headline, ...] = (
    Headline(
        "Does strict decoding remove the extra key after newText?",
        lambda r: r["observation"] == "e1-strict-vs-loose: L2 extra key after newText, strict vs loose",
        "Qwen 0.5B (Gemma, SmolLM2: the same check)",
    ),
    Headline(
        "What does strict decoding cost? (the newText string runs on instead of closing)",
        lambda r: r["observation"].startswith("Strict's cost") and "e1-strict-vs-loose-18" in r["source"],
        "Qwen 0.5B",
    ),
    Headline(
        "How often is a loose extra key the source's failure (parses; only an unknown key in an item)?",
        lambda r: r["observation"].startswith(ZOO),
        "Qwen 0.5B",
        "headline_source",
    ),
    Headline(
        "Are the extra keys invented names (a zoo)?",
        lambda r: r["observation"].startswith(ZOO),
        "Qwen 0.5B",
    ),
    Headline(
        "Does an agentic history raise extra keys over a fresh prompt?",
        _obs("e2-history: qwen-0.5b: L3 P(extra key after newText), fresh vs agentic"),
        "Qwen 0.5B",
        also=(("1.5B", _obs("e2-history: qwen-1.5b: L3 P(extra key after newText), fresh vs agentic")),),
    ),
    Headline(
        "Does stripping the thinking from the history lower them?",
        _obs("e3-thinking: qwen-0.5b: L3 P(extra key after newText), stripped vs kept"),
        "Qwen 0.5B",
        also=(("1.5B", _obs("e3-thinking: qwen-1.5b: L3 P(extra key after newText), stripped vs kept")),),
    ),
    Headline(
        "Does showing the schema closed (additionalProperties: false) lower them?",
        lambda r: r["observation"].startswith("e8-schema-view: qwen-0.5b: L3 P(extra key"),
        "Qwen 0.5B",
        also=(("1.5B", lambda r: r["observation"].startswith("e8-schema-view: qwen-1.5b: L3 P(extra key")),),
    ),
    Headline(
        "Do earlier calls of a flat Edit tool raise them?",
        _obs("e9-prior: qwen-1.5b: L3 P(extra key after newText), prior vs none"),
        "Qwen 1.5B",
        also=(("0.5B", _obs("e9-prior: qwen-0.5b: L3 P(extra key after newText), prior vs none")),),
    ),
    Headline(
        "Is the key after newText copied from the schema text?",
        lambda r: r["observation"].startswith("p1-schema-echo: qwen-0.5b: L3 P(schema word"),
        "Qwen 0.5B",
        also=(
            ("1.5B", lambda r: r["observation"].startswith("p1-schema-echo: qwen-1.5b: L3 P(schema word")),
        ),
    ),
    Headline(
        "Does the larger Qwen write extra keys loose at all?",
        lambda r: r["observation"].startswith("e12-model-panel: qwen2.5-coder-1.5b"),
        "Qwen 1.5B",
    ),
    Headline(
        "Does aligned strict sampling run on less than plain strict?",
        lambda r: r["observation"].startswith("e14-distortion: qwen2.5-coder-0.5b"),
        "Qwen 0.5B",
    ),
    Headline(
        "Can a model trained in a lenient harness still write the nested call, and what keys does it add?",
        # the rerun through the run-time adapter: the run the organism's claim rows (59-62) read
        lambda r: (
            r["observation"].startswith("e16-organisms: the construct, extended: organism:lenient-flat-flag")
            and r["source"] == "e16-organisms-lenient-flat-flag-lora"
        ),
        "Qwen 0.5B + LoRA (lenient-flat-flag)",
    ),
    Headline(
        "What does strict decoding cost on that organism?",
        lambda r: r["observation"].startswith("e16-organisms: L2 newText string goes on, strict vs loose"),
        "Qwen 0.5B + LoRA (lenient-flat-flag)",
    ),
    Headline(
        "Trained on the same sessions, does a lenient harness (stray keys accepted) leave more source-shaped calls than a strict one?",
        _obs(SAMPLED + SAME_SESSIONS),
        "Qwen 0.5B + LoRA, g2 lenient vs strict, seed 0",
        also=(("seed 1", _obs(SAMPLED + SEED_1)),),
    ),
    Headline(
        "Does it leave more invented key names after newText? (exact; a prediction added 2026-12-07)",
        _obs(INVENTED + SAME_SESSIONS),
        "Qwen 0.5B + LoRA, g2 lenient vs strict, seed 0",
        also=(("seed 1", _obs(INVENTED + SEED_1)),),
    ),
    Headline(
        "Does a trained-in key reach the evaluation at its training share? (the positive control's doses)",
        lambda r: r["observation"].startswith("e19-dose-probe-heldout: the positive control's dose-response"),
        "Qwen 0.5B + LoRA (g2-positive-control)",
    ),
    Headline(
        "Does a lenient repair (json-repair) rescue the loose calls that fail?",
        lambda r: r["observation"].startswith("Loose + repair"),
        "all four",
    ),
)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _verdict_word(verdict: str) -> str:
    v = verdict.split(":")[0].split(" (")[0]
    return v if len(v) < 40 else v[:40] + "…"


def _hit(rows: list[dict], pick: Callable[[dict], bool]) -> tuple[int, dict] | None:
    """The first row ``pick`` matches, with its number (1-based), or None."""
    return next(((i, r) for i, r in enumerate(rows, 1) if pick(r)), None)


def _link(keys: list[str], i: int, text: str) -> str:
    """``text`` as a link to row ``i``'s anchor in FINDINGS.md (``keys``: the rows' ``study.row_keys``)."""
    return f"[{text}](FINDINGS.md#{keys[i - 1]})"


def _also(rows: list[dict], keys: list[str], h: Headline) -> str:
    """The verdicts of ``h``'s companion rows, with their estimates and row numbers, read off the rows
    (`` (1.5B: contradicts, ×0.91 [0.85, 0.98], row 11)``); companions with no row are left out."""
    parts = []
    for label, pick in h.also:
        hit = _hit(rows, pick)
        if hit is None:
            continue
        i, r = hit
        res = r.get("result")
        estimate = f", {res.estimate_text()}" if res is not None else ""
        parts.append(f"{label}: {_verdict_word(r['verdict'])}{estimate}, {_link(keys, i, f'row {i}')}")
    return f" ({'; '.join(parts)})" if parts else ""


def headline_table(rows: list[dict]) -> str:
    """The headline table (markdown): one line per question whose row exists, in ``HEADLINES`` order."""
    lines = [
        "| question | local answer (interval, n) | verdict | models | reproduce | row |",
        "|---|---|---|---|---|---|",
    ]
    keys = row_keys(rows)
    for h in HEADLINES:
        hit = _hit(rows, h.pick)
        if hit is None:
            continue
        i, r = hit
        field, models = h.field, h.models + _also(rows, keys, h)
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
                _cell(x)
                for x in (
                    h.question,
                    answer,
                    f"**{verdict}**",
                    models,
                    f"`{command}`",
                    _link(keys, i, str(i)),
                )
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
