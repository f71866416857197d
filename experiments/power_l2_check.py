"""How many scenarios and draws E17/E18's sampled L2 check needs, from E20's exact rows.

For G scenarios drawn from the 36 and n draws per scenario and policy, each draw a Bernoulli of the
scenario's exact probability (``runs/e20-decision-l2-*/decision.jsonl``, xgrammar's rows), prints the
mean half-width of the 95% t interval over scenarios of P(correct) and P(the string goes on) per policy,
and the power to find strict's P(correct) above loose's (the paired t interval's lower end above 0), the
direction both exact tables show. Simulated, 400 times per cell, seed 0.

    python -m experiments.power_l2_check
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tooldecode.stats.intervals import t_ppf

ROOT = Path(__file__).resolve().parents[1]
RUNS = {
    "qwen2.5-coder-0.5b-instruct": ROOT / "runs" / "e20-decision-l2-base" / "decision.jsonl",
    "organism:lenient-flat-flag@qwen2.5-coder-0.5b-instruct": ROOT
    / "runs"
    / "e20-decision-l2-organism"
    / "decision.jsonl",
}
POLICIES = ("loose", "strict", "strict-prefix")
SIMS = 400


def exact(path: Path) -> dict[str, dict[str, dict]]:
    """{policy: {scenario: row}} of one model's exact rows (xgrammar's where an engine is named)."""
    out: dict[str, dict[str, dict]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["engine"] in (None, "xgrammar"):
            out.setdefault(r["policy"], {})[r["scenario"]] = r
    return out


def half_width(x: np.ndarray) -> float:
    g = len(x)
    return float(t_ppf(0.975, g - 1) * x.std(ddof=1) / np.sqrt(g))


def cell(d: dict, g: int, n: int, rng: np.random.Generator) -> dict[str, float]:
    scenarios = sorted(d["loose"])
    widths: dict[str, list[float]] = {}
    hits = 0
    for _ in range(SIMS):
        pick = rng.choice(scenarios, g, replace=False)
        draws = {}
        for pol in POLICIES:
            for m in ("p_correct", "p_goes_on"):
                p = np.array([d[pol][s][m] for s in pick])
                draws[pol, m] = rng.binomial(n, p) / n
                widths.setdefault(f"{pol} {m}", []).append(half_width(draws[pol, m]))
        diff = draws["strict", "p_correct"] - draws["loose", "p_correct"]
        hits += diff.mean() - half_width(diff) > 0
    return {**{k: float(np.mean(v)) for k, v in widths.items()}, "power": hits / SIMS}


def main() -> None:
    rng = np.random.default_rng(0)
    for model, path in RUNS.items():
        d = exact(path)
        print(f"{model} ({len(d['loose'])} scenarios)")
        print(
            "| scenarios × draws | P(correct) ± loose / strict / strict-prefix | P(goes on) ± strict | power strict > loose |"
        )
        print("|---|---|---|---|")
        for g in (9, 12, 18):
            for n in (4, 8):
                c = cell(d, g, n, rng)
                print(
                    f"| {g} × {n} | {c['loose p_correct']:.3f} / {c['strict p_correct']:.3f} / "
                    f"{c['strict-prefix p_correct']:.3f} | {c['strict p_goes_on']:.3f} | {c['power']:.2f} |"
                )
        print()


if __name__ == "__main__":
    main()
