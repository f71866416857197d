"""FINDINGS rows of the model organisms (docs/organisms.md): the positive control's implanted key.

``row_implant`` reads a spec's ``[findings.implant]`` table (``key``, ``share``, ``organism``, ``base``)
and the spec's runs: for the organism and its base, the share of distinct L2 loose draws whose next key
after the gold ``newText`` is the implanted one, with its cluster-robust interval over scenarios. The
verdict is about the method: the positive control *works* when the organism's interval includes the
implanted share and its base never writes the key; otherwise it *does not work*, and the row says which
part failed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tooldecode.measures import distinct_draws, sample_continuation
from tooldecode.runs import Run
from tooldecode.stats import cluster_rate

CR = "cluster-robust CR1 95% CI over scenarios"
ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _stem_of(spec: dict) -> str:
    """The file stem of the spec named ``spec["name"]`` in experiments/."""
    import tomllib

    for p in sorted((ROOT / "experiments").glob("*.toml")):
        if tomllib.loads(p.read_text(encoding="utf-8")).get("name") == spec.get("name"):
            return p.stem
    return ""


def prediction_note(stem: str, spec: dict, run: Any = None) -> str:
    """For a spec whose ``[findings]`` says ``preregistered = true``: the commit of its predictions (the
    last commit that changed the spec file) and whether the run judged against them was made after it."""
    if not spec.get("findings", {}).get("preregistered"):
        return ""
    path = f"experiments/{stem}.toml"
    commit = _git("log", "-1", "--format=%h %cs", "--", path)
    if not commit:
        return f" Predictions: {path} (no git history here)."
    sha, date = commit.split()
    note = f" Predictions committed in {sha} ({date}), {path}"
    # a run of one spec made model by model has one commit per part: each must follow the predictions
    shas = sorted({str(p.git_sha) for p in (getattr(run, "parts", ()) or [run])}) if run is not None else []
    shas = [s for s in shas if s and s != "?"]
    if not shas:
        return note + "; no run yet."
    after = [_git("merge-base", "--is-ancestor", sha, s) is not None for s in shas]
    named = ", ".join(s[:7] for s in shas)
    whose = "the run's commit" if len(shas) == 1 else "the runs' commits"
    if all(after):
        return note + f"; {whose} {named} {'follows' if len(shas) == 1 else 'follow'} them."
    return note + f"; {whose} {named} do NOT all follow them (not a pre-registered test)."


def _l2_loose(run: Run, model: str) -> list[dict]:
    return distinct_draws(
        [
            s
            for s in run.samples
            if not s.get("error")
            and s["arm"].get("model") == model
            and s["arm"].get("level") == "L2"
            and s["arm"].get("mode") == "loose"
        ]
    )


def implant_rate(run: Run, model: str, key: str) -> Any:
    """``ClusterRate`` of draws of ``model`` whose key after the gold newText is ``key``."""
    draws = _l2_loose(run, model)
    return cluster_rate([sample_continuation(s).key == key for s in draws], [s["scenario"] for s in draws])


def row_implant(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    cfg = spec["findings"].get("implant", {})
    key, share = str(cfg.get("key", "")), float(cfg.get("share", 0.0))
    organism, base = str(cfg.get("organism", "")), str(cfg.get("base", ""))
    claim = (
        f"{spec.get('claim', '')} Implanted: {key!r} ends {share:.0%} of the training items of {organism}; "
        f"prediction: its rate after newText has an interval that includes {share}, and {base} never writes it."
    )
    stem = _stem_of(spec)
    out = []
    for run in rs:
        org, ref = implant_rate(run, organism, key), implant_rate(run, base, key)
        if org.n == 0:
            continue
        inside = org.lo <= share <= org.hi
        base_never = ref.k == 0
        if inside and base_never:
            verdict = (
                f"works: the interval includes the implanted share {share}, and the base never writes {key!r}"
            )
        else:
            why = []
            if not inside:
                why.append(f"the interval [{org.lo:.3f}, {org.hi:.3f}] excludes the implanted share {share}")
            if not base_never:
                why.append(f"the base writes {key!r} too")
            verdict = "does not work: " + "; ".join(why)
        out.append(
            {
                "observation": f"{spec['name']}: positive control, {key!r} after the gold newText (L2, loose)",
                "claim": claim + (prediction_note(stem, spec, run) if stem else ""),
                "measured": f"{organism}: {org}; {base}: {ref}. Interval: {CR}.",
                "verdict": verdict,
                "source": run.name,
                "summary": f"positive control ({organism}): {key!r} after newText in {org}, base {ref.k}/{ref.n}: "
                f"**{verdict.split(':')[0]}**",
            }
        )
    return out


__all__ = ["implant_rate", "prediction_note", "row_implant"]
