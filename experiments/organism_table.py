"""The organisms' closing table (docs/organisms.md): one row per model evaluated by an organism spec, per
generation, built from the committed runs by ``make findings`` into FINDINGS, the README and
docs/organisms.md.

Per model (its loose draws unless a column says otherwise; rates with the cluster-robust CR1 95% interval
over scenarios):

- whether it writes the nested call: L2 calls that parse, the L2 draws that close the forced newText
  with the flat call's ``"}}``, and those whose call closes ``edits[]`` with a ``}`` anywhere
  (``construct_rows.competence``);
- the source's failure: source-shaped at L2 and at L1 (``tooldecode.measures``' ``source_shaped``), with
  the parse rate beside it, since a rate of keys means little where few calls parse; and at L2 the part
  of it whose key after newText is an invented name (not a word of the schema such as ``required``);
- the names: distinct never-seen names and all distinct names, each with its Chao1 richness
  (``tooldecode.construct.name_richness``);
- the contrasts: source-shaped at L2 as a ratio to ``strict-flat-flag``, ``nested`` and the base of the
  same generation, paired over the scenarios both have (``stats.paired_clusters``);
- strict's effect: the newText string that goes on, strict over loose at L2 (paired);
- the decision exactly (the generation's probe specs, L3): the mean over scenarios of the probability of
  an invented key name and of any extra key right after the gold newText, with a t interval over the
  scenarios and the mass of keys the probe's depth left unresolved beside it;
- the history variants (the generation's history spec): source-shaped at L2, fresh over agentic and
  thinking stripped over kept (paired).

A cell whose runs are not committed yet says ``not run``; the L1 and strict cells read from an arm its run
has not drawn in full over the planned scenarios (a run stopped mid-way) say ``interim``, and the draws
cell names each such arm (``Run.unfinished_arms``). The table is descriptive; the verdicts are FINDINGS'
rows of each spec's claims.

``exact_kinds_table`` splits the exact decision after the gold newText by what comes next (close the
item, each kind of key, the string going on, …) for every model of a generation's probe specs, so that
what a lumped measure adds up is read from the committed probe rows, not from a one-off count.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from experiments.common import short
from experiments.construct_rows import competence, draws, model_keys
from tooldecode.classify import (
    DECLARED,
    INVENTED,
    NEXT_ITEM,
    OTHER,
    REPEAT,
    SCHEMA_WORD,
    STRAY,
    STRING_GOES_ON,
    WRONG_CLOSER,
    WRONG_LEVEL,
)
from tooldecode.construct import NEVER_SEEN, name_richness
from tooldecode.measures import l3_values, sample_continuation, sample_event
from tooldecode.models import ORGANISM_PREFIX
from tooldecode.records import ProbeRow, SampleRecord
from tooldecode.runs import Run, model_split_runs
from tooldecode.stats import ClusterRate, cluster_rate, mean_ci, paired_clusters

#: (generation, main spec, history spec, probe specs: the exact decision after newText, one setting)
GENERATIONS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("first", "e16-organisms", "e16-organisms-history", ()),
    (
        "second",
        "e19-organisms-gen2",
        "e19-organisms-gen2-history",
        ("e19-organisms-gen2-probe", "e19-dose-probe-corpus"),
    ),
)
#: the recipes every organism is set against, by the part of its name before ``@`` (prefix ``g2-`` dropped)
REFERENCES = ("strict-flat-flag", "nested")
NOT_RUN = "not run"


def recipe_of(model: str) -> str | None:
    """The recipe of an ``organism:<recipe>@<base>`` model without its generation prefix (None for a base)."""
    if not model.startswith(ORGANISM_PREFIX):
        return None
    recipe = model[len(ORGANISM_PREFIX) :].split("@", 1)[0]
    return recipe[3:] if recipe.startswith("g2-") else recipe


def _pct(r: ClusterRate | str | None) -> str:
    if r is None:
        return NOT_RUN
    if isinstance(r, str):
        return r
    if not r.n:
        return "n/a"
    return f"{100 * r.rate:.1f} [{100 * r.lo:.1f}, {100 * r.hi:.1f}]"


def _ratio(c: Any) -> str:
    if c is None:
        return NOT_RUN
    if math.isnan(c.ratio):
        return f"no estimate (reference 0, {c.g} scenarios)"
    return f"×{c.ratio:.2f} [{c.ratio_lo:.2f}, {c.ratio_hi:.2f}] ({c.g})"


def _per_scenario(ss: Sequence[SampleRecord], pred: Callable[[SampleRecord], bool]) -> dict[str, float]:
    by: dict[str, list[bool]] = defaultdict(list)
    for s in ss:
        by[s.scenario].append(bool(pred(s)))
    return {k: sum(v) / len(v) for k, v in by.items()}


def _shaped(s: SampleRecord) -> bool:
    return sample_event(s, "source_shaped")


def _shaped_invented(s: SampleRecord) -> bool:
    return _shaped(s) and sample_continuation(s).kind == INVENTED


def _goes_on(s: SampleRecord) -> bool:
    return sample_event(s, "goes_on")


def _runs_of(runs: dict[str, Run], spec: str) -> list[Run]:
    return sorted((r for r in runs.values() if r.spec == spec and not r.shared_streams), key=lambda r: r.name)


def _home(rs: Sequence[Run], model: str, count: Callable[[Run, str], int] | None = None) -> Run | None:
    """The run of ``rs`` with the most of ``model``'s loose draws (or of what ``count`` counts): a clean
    one first, then one folder over runs of one spec read as one, then the newest."""
    best: tuple | None = None
    for r in rs:
        n = count(r, model) if count is not None else len(draws(r, model))
        key = (r.git_dirty is False, n, not r.parts, str(r.manifest.get("created", "")))
        if n and (best is None or key > best[0]):
            best = (key, r)
    return None if best is None else best[1]


def _models(rs: Sequence[Run]) -> list[str]:
    found = {str(s.arm.model) for r in rs for s in r.samples if s.arm.mode == "loose" and not s.error}
    return sorted(found, key=lambda m: (m.startswith(ORGANISM_PREFIX), recipe_of(m) or "", m))


def _paired(
    a: Sequence[SampleRecord], b: Sequence[SampleRecord], pred: Callable[[SampleRecord], bool]
) -> Any:
    va, vb = _per_scenario(a, pred), _per_scenario(b, pred)
    return paired_clusters(va, vb) if len(set(va) & set(vb)) >= 2 else None


def organism_rows(runs: dict[str, Run]) -> list[dict[str, str]]:
    """One row per (generation, model) with loose draws in a committed run of the generation's spec: the
    cells of the closing table, as text."""
    out: list[dict[str, str]] = []
    for generation, spec, history_spec, probe_specs in GENERATIONS:
        rs = _runs_of(runs, spec)
        hist = _runs_of(runs, history_spec)
        probes = [r for name in probe_specs for r in _runs_of(runs, name)]
        probes += model_split_runs(probes)
        models = _models(rs)
        homes = {m: _home(rs, m) for m in models}
        l2 = {m: draws(run, m, "L2") for m, run in homes.items() if run is not None}
        refs = {name: next((m for m in models if (recipe_of(m) or "") == name), None) for name in REFERENCES}
        bases = [m for m in models if not m.startswith(ORGANISM_PREFIX)]
        refs["base"] = bases[0] if bases else None
        for m in models:
            run = homes[m]
            if run is None:
                continue
            comp = competence(run, m)
            mine = l2.get(m, [])
            l1 = draws(run, m, "L1")
            keys, *_ = model_keys(run, m)
            strict = [s for s in run.samples if not s.error and str(s.arm.model) == m and s.arm.level == "L2"]
            masked = [s for s in strict if s.arm.mode == "strict"]
            row = {
                "generation": generation,
                "model": short(m),
                "draws": str(len(mine) + len(l1)) + _interim(run, [*mine, *l1, *masked]),
                "L2 parse": _pct(comp.get("L2 parse")),
                "flat-closer bleed": _pct(comp.get("L2 flat closer")),
                "edits[] closed by }": _pct(comp.get("L2 edits closed by brace")),
                "source-shaped L2": _pct(cluster_rate([_shaped(s) for s in mine], [s.scenario for s in mine]))
                if mine
                else "n/a",
                "source-shaped L2, invented name": _pct(
                    cluster_rate([_shaped_invented(s) for s in mine], [s.scenario for s in mine])
                )
                if mine
                else "n/a",
                "source-shaped L1": _pct(cluster_rate([_shaped(s) for s in l1], [s.scenario for s in l1]))
                + (" (interim)" if run.unfinished_arms(l1) else "")
                if l1
                else "n/a",
                "never-seen names": _names(keys, NEVER_SEEN),
                "all names": _names(keys, None),
            }
            for name in (*REFERENCES, "base"):
                ref = refs.get(name)
                row[f"vs {name}"] = (
                    "—" if ref == m else _ratio(_paired(mine, l2[ref], _shaped) if ref in l2 else None)
                )
            row["strict's effect (goes on)"] = _ratio(_paired(masked, mine, _goes_on) if masked else None) + (
                " (interim)" if masked and run.unfinished_arms(masked) else ""
            )
            h = _home(hist, m)
            for label, key, a, b in (
                ("fresh/agentic", "history", "fresh", "agentic"),
                ("stripped/kept", "thinking", False, True),
            ):
                if h is None:
                    row[label] = NOT_RUN
                    continue
                hd = draws(h, m, "L2")
                row[label] = _ratio(
                    _paired(
                        [s for s in hd if getattr(s.arm, key) == a],
                        [s for s in hd if getattr(s.arm, key) == b],
                        _shaped,
                    )
                )
            exact = _home(probes, m, _probed) if probe_specs else None
            if exact is None:
                row["exact P(invented)"] = row["exact P(extra key)"] = NOT_RUN if probe_specs else "n/a"
            else:
                row["exact P(invented)"] = _mean(exact.probe, m, "kind:invented") + (
                    f"; unresolved {_undetermined(exact.probe, m):.3f}"
                )
                row["exact P(extra key)"] = _mean(exact.probe, m, "extra_key")
            row["source"] = ", ".join(sorted({run.name, *(x.name for x in (h, exact) if x is not None)}))
            out.append(row)
    return out


def _interim(run: Run, ss: Sequence[SampleRecord]) -> str:
    """The arms of ``ss`` that ``run`` has not drawn in full over its planned scenarios, e.g.
    ``" (interim: L1 loose 20/36, L2 strict 30/36 scenarios)"``; "" when none."""
    parts = [
        f"{arm.level or 'L2'} {arm.mode} {full}/{planned}" for arm, full, planned in run.unfinished_arms(ss)
    ]
    return f" (interim: {', '.join(parts)} scenarios)" if parts else ""


def _probed(run: Run, model: str) -> int:
    """Scenarios with a probe row of ``model``'s decision after newText."""
    return len(l3_values(run.probe, "p_continue", model=model))


def _mean(rows: Sequence[ProbeRow], model: str, measure: str) -> str:
    """The mean over scenarios of ``measure`` (L3) with its t interval over the scenarios and their number."""
    values = list(l3_values(rows, measure, model=model).values())
    if not values:
        return "n/a"
    mean, lo, hi = mean_ci(values)
    return f"{mean:.3f} [{max(lo, 0.0):.3f}, {hi:.3f}] ({len(values)})"


def _undetermined(rows: Sequence[ProbeRow], model: str) -> float:
    """The mean over scenarios of the continuing mass whose key the probe's depth left unresolved."""
    values = list(l3_values(rows, "p_continue_undetermined", model=model).values())
    return sum(values) / len(values) if values else math.nan


def _names(keys: Sequence[Any], kind: str | None) -> str:
    r = name_richness(keys, kind)
    if r.occurrences == 0:
        return "0"
    return f"{r.observed} (Chao1 {r.estimate:.0f} [{r.lo:.0f}, {r.hi:.0f}])"


COLUMNS = (
    "generation",
    "model",
    "draws",
    "L2 parse",
    "flat-closer bleed",
    "edits[] closed by }",
    "source-shaped L2",
    "source-shaped L2, invented name",
    "source-shaped L1",
    "never-seen names",
    "all names",
    "vs strict-flat-flag",
    "vs nested",
    "vs base",
    "strict's effect (goes on)",
    "fresh/agentic",
    "stripped/kept",
    "exact P(invented)",
    "exact P(extra key)",
    "source",
)


def organism_table(runs: dict[str, Run]) -> str:
    """The closing table as Markdown, with its reading of what is and is not yet run; a line saying so
    when no organism spec has a committed run."""
    rows = organism_rows(runs)
    if not rows:
        return "No run of an organism spec is committed yet (`python -m scripts.jobqueue status` lists the jobs)."
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *("| " + " | ".join(r[c] for c in COLUMNS) + " |" for r in rows),
    ]
    return (
        "Per model and generation, its loose draws (% [cluster-robust 95% interval over scenarios]). "
        "`vs …`: source-shaped at L2 as a ratio to that model of the same generation, paired over the scenarios "
        "both have (their number in brackets); strict's effect: the newText string that goes on, strict over "
        "loose at L2; fresh/agentic and stripped/kept: source-shaped at L2 in the generation's history run. "
        "Flat-closer bleed: the forced newText closed by the flat call's `\"}}`; edits[] closed by }: the "
        "call closes its edits[] with a `}` where `]` belongs, right after newText or after more keys. "
        "Source-shaped L2, invented name: the part of source-shaped L2 whose key after newText is an invented "
        "name, not a word of the schema. Names: distinct undeclared item-key names with their Chao1 richness. Exact: the probability right "
        "after the gold newText (L3, the generation's probe at one setting), the mean over scenarios with a "
        "t interval over them (their number in brackets); invented: a name that is no key of the item, of "
        "another level or of the schema; unresolved: continuing mass whose key the probe's depth did not "
        "resolve, which may hold more of either. `not run`: the run is not "
        "committed yet; `interim`: an arm its run has not yet drawn in full over the planned scenarios (the "
        "draws column names each with its full/planned scenarios), whose cells cover the scenarios drawn. "
        "Descriptive: the verdicts are the FINDINGS rows of each spec's claims.\n\n" + "\n".join(lines) + "\n"
    )


#: the rows of the exact split after newText: (label, L3 measure); ``p_continue_undetermined`` is the
#: continuing mass whose key the probe's depth did not resolve, ``p_undetermined`` the mass it resolved
#: into no group
EXACT_KINDS: tuple[tuple[str, str], ...] = (
    ("close the item", "p_close"),
    ("a word of the schema (`required`, …)", f"kind:{SCHEMA_WORD}"),
    ("a repeat of a declared key", f"kind:{REPEAT}"),
    ("a key of another level", f"kind:{WRONG_LEVEL}"),
    ("an invented name", f"kind:{INVENTED}"),
    ("an unwritten declared key", f"kind:{DECLARED}"),
    ("the next item", f"kind:{NEXT_ITEM}"),
    ("something else after the comma, or else", f"kind:{OTHER}"),
    ("a key not resolved at the probe's depth", "p_continue_undetermined"),
    ("the string goes on", f"kind:{STRING_GOES_ON}"),
    ("a wrong closer", f"kind:{WRONG_CLOSER}"),
    ("a stray token", f"kind:{STRAY}"),
    ("undecided at the probe's depth", "p_undetermined"),
)


def exact_kinds_table(runs: dict[str, Run]) -> str:
    """Per generation with probe specs: what follows the gold newText, exactly (L3, one setting), split by
    kind, one column per probed model; each cell the mean over scenarios with its t interval. The
    kinds add up to 1 per row of the probe, so the column means do too."""
    blocks = []
    for generation, _main, _history, probe_specs in GENERATIONS:
        probes = [r for spec in probe_specs for r in _runs_of(runs, spec)]
        models = sorted(
            {m for r in probes for m in r.models if _probed(r, m)},
            key=lambda m: (m.startswith(ORGANISM_PREFIX), recipe_of(m) or "", m),
        )
        homes = {m: h for m in models if (h := _home(probes, m, _probed)) is not None}
        if not homes:
            continue
        head = [
            "P(after the gold `newText`)",
            *(f"`{short(m).removeprefix(ORGANISM_PREFIX)}` ({_probed(h, m)})" for m, h in homes.items()),
        ]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for label, measure in EXACT_KINDS:
            cells = []
            for m, h in homes.items():
                values = list(l3_values(h.probe, measure, model=m).values())
                if not values:
                    cells.append("n/a")
                    continue
                mean, lo, hi = mean_ci(values)
                cells.append(f"{mean:.3f} [{max(lo, 0.0):.3f}, {min(hi, 1.0):.3f}]")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        sources = ", ".join(sorted({h.name for h in homes.values()}))
        blocks.append(
            f"The {generation} generation, exactly (L3: the probability right after the gold `newText`, "
            "one setting), the mean over scenarios with a t interval over them (the scenarios in brackets "
            f"in the header). Runs: {sources}. A positive control's implanted key is no key of the schema, so "
            "it counts as an invented name. Descriptive; the verdicts are the FINDINGS rows of each "
            "probe spec's claims.\n\n" + "\n".join(lines) + "\n"
        )
    if not blocks:
        return "No probe run of an organism generation is committed yet.\n"
    return "\n".join(blocks)


__all__ = [
    "COLUMNS",
    "EXACT_KINDS",
    "GENERATIONS",
    "exact_kinds_table",
    "organism_rows",
    "organism_table",
    "recipe_of",
]
