"""FINDINGS rows of the model organisms (docs/organisms.md): the positive control's implanted key, and
the pre-registered predictions that are no comparison of two arms (``row_predictions``). Each row's
figure has the competence of its models beside it (``experiments.construct_rows.competence_note``).

``row_implant`` reads a spec's ``[findings.implant]`` table (``key``, ``share``, ``organism``, ``base``)
and the spec's runs: for the organism and its base, the share of distinct L2 loose draws whose next key
after the gold ``newText`` is the implanted one, with its cluster-robust interval over scenarios. The
verdict is about the method: the positive control *works* when the organism's interval includes the
implanted share and its base never writes the key; otherwise it *does not work*, and the row says which
part failed.
"""

from __future__ import annotations

import math
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.common import short
from experiments.construct_rows import competence_note, pred_competence
from tooldecode.classify import INVENTED
from tooldecode.measures import distinct_draws, item_keys, l2_values, sample_continuation
from tooldecode.records import SampleRecord
from tooldecode.runs import Run, model_split_runs
from tooldecode.stats import INTERIM, chao1, cluster_rate, paired_clusters

CR = "cluster-robust CR1 95% CI over scenarios"
ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def spec_stem(spec: dict) -> str:
    """The file stem of the spec named ``spec["name"]`` in experiments/."""
    import tomllib

    for p in sorted((ROOT / "experiments").glob("*.toml")):
        if tomllib.loads(p.read_text(encoding="utf-8")).get("name") == spec.get("name"):
            return p.stem
    return ""


def prediction_note(stem: str, spec: dict, run: Any = None) -> str:
    """For a spec whose ``[findings]`` says ``preregistered = true``: the commit of its predictions (the
    last commit that changed the spec file) and whether the run judged against them was made after it.

    A findings addendum (``reads = SPEC``) may name in ``read_before`` the models whose runs were read
    before it was written: a part of the run with only those models is named as read before, not
    checked against the commit; every other part must follow it."""
    findings = spec.get("findings", {})
    if not findings.get("preregistered"):
        return ""
    path = f"experiments/{stem}.toml"
    commit = _git("log", "-1", "--format=%h %cs", "--", path)
    if not commit:
        return f" Predictions: {path} (no git history here)."
    sha, date = commit.split()
    note = f" Predictions committed in {sha} ({date}), {path}"
    # a run of one spec made model by model has one commit per part: each must follow the predictions
    parts = list(getattr(run, "parts", ()) or [run]) if run is not None else []
    before = set(findings.get("read_before", []))
    if before:
        read = [p for p in parts if p.models and p.models <= before]
        parts = [p for p in parts if p not in read]
        named = ", ".join(f"{p.name} ({str(p.git_sha)[:7]})" for p in read)
        note += f"; written after the runs of {', '.join(sorted(before))} were read, as the file states" + (
            f" (here {named}, whose figures were known when the sizes were set)" if read else ""
        )
    shas = sorted({str(p.git_sha) for p in parts})
    shas = [s for s in shas if s and s != "?"]
    if not shas:
        return note + ("; no run of the other arms yet." if before else "; no run yet.")
    after = [_git("merge-base", "--is-ancestor", sha, s) is not None for s in shas]
    named = ", ".join(s[:7] for s in shas)
    whose = "the run's commit" if len(shas) == 1 else "the runs' commits"
    if all(after):
        return note + f"; {whose} {named} {'follows' if len(shas) == 1 else 'follow'} them."
    return note + f"; {whose} {named} do NOT all follow them (not a pre-registered test)."


def _draws(run: Run, model: str, level: str, mode: str = "loose") -> list[SampleRecord]:
    return distinct_draws(
        [
            s
            for s in run.samples
            if not s.error and s.arm.model == model and s.arm.level == level and s.arm.mode == mode
        ]
    )


def implant_rate(run: Run, model: str, key: str) -> Any:
    """``ClusterRate`` of draws of ``model`` whose key after the gold newText is ``key``."""
    draws = _draws(run, model, "L2")
    return cluster_rate([sample_continuation(s).key == key for s in draws], [s.scenario for s in draws])


def row_implant(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    cfg = spec["findings"].get("implant", {})
    key, share = str(cfg.get("key", "")), float(cfg.get("share", 0.0))
    organism, base = str(cfg.get("organism", "")), str(cfg.get("base", ""))
    claim = (
        f"{spec.get('claim', '')} Implanted: {key!r} ends {share:.0%} of the training items of {organism}; "
        f"prediction: its rate after newText has an interval that includes {share}, and {base} never writes it."
    )
    stem = spec_stem(spec)
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
                "measured": f"{organism}: {org}; {base}: {ref}. Interval: {CR}."
                + competence_note(run, [organism, base]),
                "verdict": verdict,
                "source": run.name,
                "summary": f"positive control ({organism}): {key!r} after newText in {org}, base {ref.k}/{ref.n}: "
                f"**{verdict.split(':')[0]}**",
            }
        )
    return out


# --------------------------------------------------------------------------------------------- predictions


def _pool(rs: list[Run]) -> list[Run]:
    """The spec's runs and its model-by-model runs read as one."""
    return [*rs, *model_split_runs(rs)]


def _best_run(pool: list[Run], want: list[tuple[str, str]]) -> Run | None:
    """Among ``pool`` (``_pool``), the run (clean first) with the most draws of every ``(model, level)``
    in ``want``; None when none has them all."""
    best = None
    for run in pool:
        counts = [len(_draws(run, m, lv)) for m, lv in want]
        if min(counts, default=0) == 0:
            continue
        key = (run.git_dirty is False, sum(counts), not run.parts)
        if best is None or key > best[0]:
            best = (key, run)
    return None if best is None else best[1]


def _invented(run: Run, model: str, levels: list[str]) -> tuple[list[tuple[str, str, Any]], dict[str, int]]:
    """(invented item keys as (level, scenario, ItemKey-or-name), distinct draws per level)."""
    found: list[tuple[str, str, Any]] = []
    n = {}
    for level in levels:
        draws = _draws(run, model, level)
        n[level] = len(draws)
        for s in draws:
            if level == "L1":
                found += [(level, s.scenario, k) for k in item_keys(s) if k.kind == INVENTED]
            else:
                c = sample_continuation(s)
                if c.kind == INVENTED and c.key is not None:
                    found.append((level, s.scenario, c.key))
    return found, n


def _name(k: Any) -> str:
    return k if isinstance(k, str) else k.key


def _pred_names(p: dict, run: Run) -> tuple[str, str]:
    model, levels = str(p["model"]), list(p.get("levels", ["L1", "L2"]))
    found, n = _invented(run, model, levels)
    rich = chao1(Counter(_name(k) for _, _, k in found)) if found else None
    names = Counter(_name(k) for _, _, k in found).most_common(12)
    measured = (
        f"{model}, loose, {' + '.join(f'{lv}: {n[lv]} distinct draws' for lv in levels)}: "
        f"{len(found)} invented item keys, "
        + (
            f"{rich.observed} distinct names, Chao1 {rich.estimate:.1f} [{rich.lo:.1f}, {rich.hi:.1f}] "
            f"(95% log-normal; {rich.singletons} seen once, {rich.doubletons} twice); most written: {dict(names)}"
            if rich
            else "no invented name"
        )
    )
    lo_d, lo_c = int(p["min_distinct"]), float(p["min_chao1"])
    if rich is None or rich.observed < lo_d or rich.estimate < lo_c:
        got = f"{rich.observed} distinct, Chao1 {rich.estimate:.1f}" if rich else "none"
        return (
            measured,
            f"does not hold: {got} (predicted at least {lo_d} distinct and Chao1 at least {lo_c:g})",
        )
    return (
        measured,
        f"holds: {rich.observed} distinct names, Chao1 {rich.estimate:.1f} (predicted ≥ {lo_d}, ≥ {lo_c:g})",
    )


def _pred_place(p: dict, run: Run) -> tuple[str, str]:
    model = str(p["model"])
    found, n = _invented(run, model, ["L1"])
    keys = [(sc, k) for _, sc, k in found]
    new_key = str(p.get("after", "newText"))
    if not keys:
        return (
            f"{model}, L1 loose, {n['L1']} distinct draws: no invented item key",
            "not measured: no invented key",
        )
    rate = cluster_rate([k.last and k.after == new_key for _, k in keys], [sc for sc, _ in keys])
    measured = (
        f"{model}, L1 loose ({n['L1']} distinct draws): invented item keys that are the item's last key, "
        f"written right after {new_key}: {rate} (cluster-robust CR1 95% CI over scenarios). At L2 every key is "
        f"written after the gold {new_key} by construction (not counted)."
    )
    share = float(p["min_share"])
    if rate.lo >= share:
        return measured, f"holds: the interval's lower end {rate.lo:.2f} is at least {share:g}"
    if rate.hi < share:
        return measured, f"does not hold: the interval [{rate.lo:.2f}, {rate.hi:.2f}] is below {share:g}"
    return measured, f"inconclusive: the interval [{rate.lo:.2f}, {rate.hi:.2f}] includes {share:g}"


def _pred_not_above(p: dict, run: Run) -> tuple[str, str]:
    """Arm ``a`` is no higher than arm ``b`` at every level: the paired difference's interval includes
    or is below 0."""
    a, b, measure = str(p["a"]), str(p["b"]), str(p["measure_of"])
    parts, verdicts = [], []
    for level in p.get("levels", ["L2"]):
        va, ea, _, na = l2_values(_draws(run, a, level), measure)
        vb, eb, _, nb = l2_values(_draws(run, b, level), measure)
        shared = sorted(set(va) & set(vb))
        if len(shared) < 2:
            parts.append(f"{level}: fewer than 2 paired scenarios")
            verdicts.append("not measured")
            continue
        cmp = paired_clusters({s: va[s] for s in shared}, {s: vb[s] for s in shared})
        parts.append(
            f"{level} loose: {a} {ea}/{na} draws, {b} {eb}/{nb}, {cmp.g} paired scenarios, difference "
            f"{cmp.diff:+.3f} [{cmp.lo:+.3f}, {cmp.hi:+.3f}], ratio {cmp.ratio:.2f} [{cmp.ratio_lo:.2f}, {cmp.ratio_hi:.2f}]"
        )
        # no spread across scenarios leaves no t interval (nan): the difference itself decides
        lo = cmp.lo if math.isfinite(cmp.lo) else cmp.diff
        verdicts.append("holds" if ea + eb == 0 or lo <= 0 else "does not hold")
    measured = f"{measure}: " + "; ".join(parts) + " (paired over scenarios, t intervals)"
    if "does not hold" in verdicts:
        return measured, f"does not hold: {a} is above {b} (a difference interval above 0)"
    if "not measured" in verdicts:
        return measured, "not measured: a level has no paired scenarios"
    return measured, "holds: every difference interval includes or is below 0 (no higher than the reference)"


@dataclass(frozen=True)
class DoseReading:
    """What the positive control's dose rule reads: the base's rate of the key and each dose's, in the
    committed order; the dose chosen, or the first unmeasured dose that leaves the rule undecided.

    ``doses`` holds ``(organism, share, epochs, rate)``; ``chosen`` is an index into it (None: none yet,
    or none qualifies); ``undecided`` names the first dose without draws before any chosen one."""

    key: str
    base: str
    base_rate: Any
    doses: tuple[tuple[str, float, int, Any], ...]
    chosen: int | None
    undecided: str | None

    @property
    def state(self) -> str:
        """``unmeasured`` (no base draws), ``base-writes`` (no rate measures the implant alone),
        ``chosen``, ``undecided`` (a dose before any chosen one has no draws) or ``none`` (every dose
        measured, none covers its share)."""
        if self.base_rate.n == 0:
            return "unmeasured"
        if self.base_rate.k > 0:
            return "base-writes"
        if self.chosen is not None:
            return "chosen"
        return "undecided" if self.undecided is not None else "none"

    @property
    def contrast_epochs(self) -> int | None:
        """The epochs every contrast recipe trains: the chosen dose's, 1 when no dose qualifies (or the
        base writes the key), None while the rule is undecided or unmeasured."""
        if self.state == "chosen":
            assert self.chosen is not None
            return self.doses[self.chosen][2]
        return 1 if self.state in ("none", "base-writes") else None


def read_dose_rule(p: dict, run: Run) -> DoseReading:
    """The dose rule of prediction ``p`` (``key``, ``base``, ``doses``) read on ``run``: the doses in
    their committed order; the chosen one is the first whose L2 loose rate of ``key`` right after the
    gold newText has a cluster-robust interval that covers its share while ``base`` never writes the
    key. An unmeasured dose before the chosen one leaves the rule undecided (it reads the doses in
    order)."""
    key, base = str(p["key"]), str(p["base"])
    ref = implant_rate(run, base, key)
    doses: list[tuple[str, float, int, Any]] = []
    chosen, undecided = None, None
    for d in p["doses"]:
        org, share, epochs = str(d["organism"]), float(d["share"]), int(d.get("epochs", 1))
        r = implant_rate(run, org, key)
        doses.append((org, share, epochs, r))
        if r.n == 0:
            undecided = undecided or (None if chosen is not None else org)
            continue
        if r.lo <= share <= r.hi and chosen is None and undecided is None and ref.n and ref.k == 0:
            chosen = len(doses) - 1
    return DoseReading(key, base, ref, tuple(doses), chosen, undecided)


def dose_rule_of(spec: dict) -> dict | None:
    """The spec's dose-rule prediction (``judge = "dose_rule"``), or None."""
    for p in spec.get("findings", {}).get("predictions", []):
        if judge_of(p) == "dose_rule":
            return p
    return None


def dose_reading(p: dict, rs: list[Run]) -> DoseReading | None:
    """The dose rule read on the run that FINDINGS reads it on (the spec's runs, and its model-by-model
    runs as one: the one with the most draws of the base and the first dose); None when no run has
    both."""
    models = _models_of(p)
    run = _best_run(_pool(rs), [(m, str(p.get("level", "L2"))) for m in models[:2]])
    return None if run is None else read_dose_rule(p, run)


def _dose_name(org: str, share: float, epochs: int) -> str:
    return f"{org} (share {share:g}, {epochs} epoch{'s' if epochs != 1 else ''})"


def _pred_dose_rule(p: dict, run: Run) -> tuple[str, str]:
    """The dose rule's FINDINGS row: ``read_dose_rule`` in words."""
    r = read_dose_rule(p, run)
    key, ref = r.key, r.base_rate
    parts = [f"{r.base} (base): {ref}"]
    for org, share, epochs, rate in r.doses:
        name = _dose_name(org, share, epochs)
        if rate.n == 0:
            parts.append(f"{name}: no draws")
            continue
        covers = rate.lo <= share <= rate.hi
        parts.append(f"{name}: {rate}{', covers its share' if covers else ''}")
    measured = f"{key!r} right after the gold newText, L2 loose ({CR}): " + "; ".join(parts) + "."
    state = r.state
    if state == "unmeasured":
        return measured, "not measured: the base has no L2 loose draws in this run"
    if state == "base-writes":
        return measured, (
            f"no dose qualifies: the base writes {key!r} ({ref.k:g}/{ref.n}), so no rate measures the implant "
            "alone; the contrasts stay at one epoch"
        )
    if state == "chosen":
        assert r.chosen is not None
        org, share, epochs, rate = r.doses[r.chosen]
        empty = " (no draw writes it: the interval covers the share for lack of draws)" if rate.k == 0 else ""
        return measured, (
            f"dose chosen: {_dose_name(org, share, epochs)}, its interval [{rate.lo:.3f}, {rate.hi:.3f}] "
            f"covers {share:g}{empty} and the base never writes {key!r}; every contrast recipe trains "
            f"{epochs} epoch{'s' if epochs != 1 else ''}"
        )
    if state == "undecided":
        org = str(r.undecided)
        share, epochs = next((d[1], d[2]) for d in r.doses if d[0] == org)
        return measured, (
            f"not measured: {_dose_name(org, share, epochs)} has no draws, and the rule reads the "
            "doses in order"
        )
    return measured, (
        "no dose qualifies: no interval covers its share; the contrasts stay at one epoch and every verdict "
        "is read against the measured attenuation (the exact probe on held-out generator sessions vs the "
        "evaluation scenarios)"
    )


PREDICTION_JUDGES = {
    "invented_names": _pred_names,
    "invented_place": _pred_place,
    "not_above": _pred_not_above,
    "competence": pred_competence,
    "dose_rule": _pred_dose_rule,
}


def judge_of(p: dict) -> str | None:
    """A prediction's judge: its ``judge``, else ``competence`` for the competence precondition (a
    prediction committed with its thresholds, ``min_ratio_to_goal`` among them, before the parse-rate
    measure existed)."""
    return p.get("judge") or ("competence" if "min_ratio_to_goal" in p else None)


def _models_of(p: dict) -> list[str]:
    """The models a prediction reads."""
    out = [str(p[k]) for k in ("model", "a", "b", "base", "goal") if k in p]
    return [*out, *(str(m) for m in p.get("models", [])), *(str(d["organism"]) for d in p.get("doses", []))]


def _competence_so_far(p: dict, pool: list[Run], levels: list[str]) -> tuple[dict, Run, list[str]] | None:
    """The competence precondition narrowed to the organisms it names that have draws: (the prediction
    with only those ``models``, the run that holds them with its base and goal, the organisms not yet
    run); None when no named organism has draws, or no run holds the base and goal beside them.
    ``pool`` is ``_pool`` of the spec's runs."""
    named = [str(m) for m in p.get("models", [])]
    ran = [m for m in named if any(all(_draws(r, m, lv) for lv in levels) for r in pool)]
    if not ran or len(ran) == len(named):
        return None
    fixed = [str(p[k]) for k in ("base", "goal") if p.get(k)]
    run = _best_run(pool, [(m, lv) for m in [*fixed, *ran] for lv in levels])
    return None if run is None else ({**p, "models": ran}, run, [m for m in named if m not in ran])


def row_predictions(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    """One row per ``[[findings.predictions]]`` table with a ``judge`` (``PREDICTION_JUDGES``): the
    prediction as committed, what the runs measured and whether it holds; a prediction without a
    ``judge`` is descriptive and gets no row."""
    stem = spec_stem(spec)
    pool = _pool(rs)
    out = []
    for p in spec["findings"].get("predictions", []):
        judge = judge_of(p)
        if judge is None:
            continue
        if judge not in PREDICTION_JUDGES:
            raise KeyError(
                f"experiments/{stem}.toml: prediction judge {judge!r} unknown; known: {', '.join(PREDICTION_JUDGES)}"
            )
        models = _models_of(p)
        levels = list(p.get("levels", [p.get("level", "L1" if judge == "invented_place" else "L2")]))
        # the dose rule decides from the base and the first dose on; the later doses may still be running
        needed = models[:2] if judge == "dose_rule" else models
        run = _best_run(pool, [(m, lv) for m in needed for lv in levels])
        # the competence precondition is per organism: the ones run are read while the others wait
        not_run: list[str] = []
        so_far = _competence_so_far(p, pool, levels) if run is None and judge == "competence" else None
        if so_far is not None:
            p, run, not_run = so_far
            models = needed = _models_of(p)
        claim = f"{spec.get('claim', '')} Prediction: {p['label']}: {p['prediction']}."
        if run is None:
            out.append(
                {
                    "observation": f"{spec['name']}: {p['label']}",
                    "claim": claim + (prediction_note(stem, spec) if stem else ""),
                    "measured": "not measured: no committed run has these models and levels (rerun needed)",
                    "verdict": "not measured",
                    "source": f"experiments/{stem}.toml",
                    "summary": f"{p['label']}: not measured",
                }
            )
            continue
        measured, verdict = PREDICTION_JUDGES[judge](p, run)
        if judge != "competence":
            measured += competence_note(run, models)
        if not_run:
            names = ", ".join(short(m) for m in not_run)
            measured += f" Not run yet: {names}."
            # one organism below its base already decides "every organism"; a pass waits for the rest
            if not verdict.startswith("does not hold"):
                verdict = f"{INTERIM} (no verdict until {names} {'is' if len(not_run) == 1 else 'are'} run; so far {verdict.removeprefix('holds: ')})"
        # an arm the judge reads that its run has not drawn in full (a run stopped mid-way): no verdict yet
        read = [
            s
            for s in run.samples
            if not s.error and s.arm.mode == "loose" and s.arm.level in levels and s.arm.model in needed
        ]
        unfinished = run.progress_note(read)
        if unfinished:
            verdict = f"{INTERIM} (no verdict until the run is complete: {unfinished})"
        out.append(
            {
                "observation": f"{spec['name']}: {p['label']}",
                "claim": claim + (prediction_note(stem, spec, run) if stem else ""),
                "measured": measured,
                "verdict": verdict,
                "source": run.name,
                "summary": f"{p['label']}: **{verdict.split(':')[0].split(' (')[0]}**",
            }
        )
    return out


__all__ = [
    "PREDICTION_JUDGES",
    "DoseReading",
    "dose_reading",
    "dose_rule_of",
    "read_dose_rule",
    "implant_rate",
    "judge_of",
    "prediction_note",
    "row_implant",
    "row_predictions",
    "spec_stem",
]
