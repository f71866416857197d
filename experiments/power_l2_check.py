"""How many scenarios and draws E17/E18's sampled L2 check needs, from E20's exact rows.

For G scenarios drawn from the 36 and n draws per scenario and policy, each draw a Bernoulli of the
scenario's exact probability (``runs/e20-decision-l2-*/decision.jsonl``, xgrammar's rows), prints the
mean half-width of the 95% t interval over scenarios of P(correct) and P(the string goes on) per policy,
and the power to find strict's P(correct) above loose's (the paired t interval's lower end above 0), the
direction both exact tables show. Simulated, 400 times per cell, seed 0.

A second table sizes strict-aligned's sampled L2 arm, which checks the estimate of
``tooldecode.distortion.decision_table.with_draw_validity`` (loose's exact masses × the share of the
model's committed loose L2 draws in each bucket that ended valid): per scenario, P_A(correct) and
P(valid) = Σ P(b)·V(b) from it; for G = 18 scenarios and n strict-aligned draws each (loose at 4), the
mean 95% half-width of strict-aligned's P(correct), and the power of E17's row "strict-aligned's
P(wrong but valid) vs loose's" (each strict-aligned call is valid, so its P(wrong but valid) is
1 − P_A(correct); loose's is P(valid) − P(correct)). It also prints the walk tokens each arm size costs,
from the rejection arithmetic: a walk whose string goes on and does not end valid runs to the 1,024-token
cap, so an accepted draw costs about P(goes on) / P(valid) × 1,024 tokens (seed 1).

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


#: the committed sampled runs whose loose L2 draws give V(b) (the run with the most of them is used)
SAMPLED = {
    "qwen2.5-coder-0.5b-instruct": ("e17-strict-cost-base", "e18-remedies-base"),
    "organism:lenient-flat-flag@qwen2.5-coder-0.5b-instruct": (
        "e17-strict-cost-lenient-flat-flag",
        "e18-remedies-lenient-flat-flag",
    ),
}
CAP = 1024


def aligned_cells(model: str, path: Path) -> dict[str, dict[str, float]]:
    """{scenario: {p_correct_loose, p_valid_loose, p_correct_aligned, p_goes_on}} at the decision: loose's
    exact row and strict-aligned's estimate from the model's committed loose L2 draws."""
    from tooldecode.distortion.decision import DecisionRow
    from tooldecode.distortion.decision_table import with_draw_validity

    rows = [
        DecisionRow(**r)
        for r in map(json.loads, path.read_text().splitlines())
        if r["policy"] in ("loose", "strict-aligned")
    ]
    runs = [ROOT / "runs" / r for r in SAMPLED[model] if (ROOT / "runs" / r / "samples.jsonl").exists()]
    est = with_draw_validity(rows, runs)
    loose = {r.scenario: r for r in est if r.policy == "loose"}
    out: dict[str, dict[str, float]] = {}
    for r in est:
        if r.policy != "strict-aligned":
            continue
        lo, v = loose[r.scenario], r.kinds  # the estimate keeps each bucket's share V(b) in its kinds
        valid = (
            lo.p_close_complete
            + (lo.p_close_diverges + lo.p_close_unresolved) * v["valid_close_diverges"]
            + lo.p_goes_on * v["valid_goes_on"]
            + lo.p_other * v["valid_other"]
            + lo.p_undetermined * v["valid_all"]
        )
        out[r.scenario] = {
            "p_correct_loose": lo.p_correct,
            "p_valid_loose": valid,
            "p_correct_aligned": r.p_correct,
            "p_goes_on": lo.p_goes_on,
        }
    return out


def aligned_cell(cells: dict, n: int, rng: np.random.Generator, g: int = 18) -> dict[str, float]:
    scenarios = sorted(cells)
    widths, hits = [], 0
    for _ in range(SIMS):
        pick = rng.choice(scenarios, g, replace=False)
        pa = np.array([cells[s]["p_correct_aligned"] for s in pick])
        pc = np.array([cells[s]["p_correct_loose"] for s in pick])
        pv = np.array([cells[s]["p_valid_loose"] for s in pick])
        aligned = rng.binomial(n, pa) / n
        widths.append(half_width(aligned))
        # loose's draws: correct, valid but wrong, or neither (4 a scenario, as E17 draws them at L2)
        k = np.array(
            [rng.multinomial(4, [c, max(v - c, 0.0), max(1 - v, 0.0)]) for c, v in zip(pc, pv, strict=True)]
        )
        diff = (1 - aligned) - k[:, 1] / 4
        hits += diff.mean() - half_width(diff) > 0
    tokens = sum(cells[s]["p_goes_on"] / cells[s]["p_valid_loose"] * CAP for s in scenarios) / len(scenarios)
    return {"half_width": float(np.mean(widths)), "power": hits / SIMS, "tokens_per_draw": tokens}


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
    rng = np.random.default_rng(1)
    print("strict-aligned at L2, 18 scenarios (loose at 4 draws a scenario)")
    print(
        "| model | draws a scenario | P(correct) ± | power wrong-but-valid > loose | walk tokens a draw (mean over the 36) |"
    )
    print("|---|---|---|---|---|")
    for model, path in RUNS.items():
        cells = aligned_cells(model, path)
        for n in (1, 2, 4):
            c = aligned_cell(cells, n, rng)
            print(
                f"| {model} | {n} | {c['half_width']:.3f} | {c['power']:.2f} | {c['tokens_per_draw']:.0f} |"
            )


if __name__ == "__main__":
    main()
