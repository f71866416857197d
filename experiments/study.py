"""The study's findings: rows of FINDINGS.md built from the specs in experiments/ and their runs.

Driven by the specs: every ``experiments/*.toml`` with a ``[findings]`` table contributes one verdict
row per ``[[findings.effects]]`` (judged by ``tooldecode.report.claims.evaluate_effect`` against the run
that pairs the most scenarios) and the descriptive rows named in ``findings.rows`` (``ROWS``: builders in
``sampled_rows``, ``probe_rows`` and ``organism_rows``, fed with the runs whose manifest names that spec).
Corpus rows (``corpus_rows``: what the key after newText is, which arms are copies) read every run.
Every run of a spec whose models include an organism gets the construct rows (``construct_rows``: the
competence and undeclared item keys of each model, after the corpus rows), and every other row of such a
spec has its models' competence beside its figure. No run directory name appears here; the study's
fixed names are in ``common``. ``write_findings`` writes the table.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import sys
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments import probe_rows, sampled_rows
from experiments.common import ENGINES_SPEC_PREFIX, runs_of, shared_streams_line, short, source
from experiments.construct_rows import competence_note, construct_rows, organism_spec
from experiments.corpus_rows import row_duplicates, row_repair, row_zoo
from experiments.decision_rows import decision_runs, row_decision_l2
from experiments.dose_rows import row_dose_response
from experiments.organism_rows import prediction_note, row_implant, row_predictions
from experiments.remedy_rows import row_remedies
from tooldecode.experiments.spec import as_list
from tooldecode.measures import MeasureError
from tooldecode.records import ProbeRow
from tooldecode.report import evaluate_effect
from tooldecode.runs import Run

ROOT = Path(__file__).resolve().parent


ROWS: dict[str, Callable[[dict, list[Run], dict[str, Run]], list[dict]]] = {
    "l0_free": sampled_rows.row_l0_free,
    "strict_cost": sampled_rows.row_strict_cost,
    "implant": row_implant,
    "predictions": row_predictions,
    "agreement": sampled_rows.row_agreement,
    "entropy": probe_rows.row_entropy,
    "items": probe_rows.row_items,
    "open_grammar": sampled_rows.row_open_grammar,
    "panel": sampled_rows.row_panel,
    "noise": sampled_rows.row_noise,
    "wire": probe_rows.row_wire,
    "shape": probe_rows.row_shape,
    "e11": sampled_rows.row_e11,
    "echo": probe_rows.row_echo,
    "transcripts": probe_rows.row_transcripts,
    "decision_l2": row_decision_l2,
    "remedies": row_remedies,
    "dose_response": row_dose_response,
}


# ---------------------------------------------------------------------------------------------
# assembly


def load_specs(root: Path = ROOT) -> list[tuple[str, dict]]:
    """(file stem, spec) of every spec with a ``[findings]`` table, in suite order."""
    out = []
    for p in sorted(
        root.glob("*.toml"),
        # the file name breaks ties (e16_organisms before e16_organisms_history): a directory's listing
        # order differs between file systems, and FINDINGS must not
        key=lambda p: (
            p.stem[0],
            int("".join(c for c in p.stem.split("_")[0][1:] if c.isdigit()) or 0),
            p.stem,
        ),
    ):
        spec = tomllib.loads(p.read_text(encoding="utf-8"))
        if "findings" in spec:
            out.append((p.stem, spec))
    check_addenda(out)
    return out


def runs_spec(spec: dict) -> str:
    """The spec name whose runs ``spec``'s rows read: its own, or for a findings addendum (``[findings]
    reads = "..."``, a file of later-dated predictions that runs nothing) the spec it reads."""
    return str(spec["findings"].get("reads") or spec["name"])


def check_addenda(specs: list[tuple[str, dict]]) -> None:
    """Every findings addendum reads a spec of the suite and names only that spec's models in its
    ``read_before``; ``SpecError`` (one line, naming the file) otherwise."""
    from tooldecode.experiments import SpecError

    by_name = {spec["name"]: spec for _, spec in specs}
    for stem, spec in specs:
        reads = spec["findings"].get("reads")
        if reads is None:
            if spec["findings"].get("read_before"):
                raise SpecError(
                    f"experiments/{stem}.toml: [findings] read_before applies to an addendum only "
                    "(one that says reads = SPEC); remove it or name the spec it reads"
                )
            continue
        if reads not in by_name or by_name[reads]["findings"].get("reads"):
            raise SpecError(
                f"experiments/{stem}.toml: [findings] reads {reads!r}, which is no spec of the suite with its "
                f"own runs; name one of: {', '.join(sorted(n for n, s in by_name.items() if not s['findings'].get('reads')))}"
            )
        if "models" in spec:
            raise SpecError(
                f"experiments/{stem}.toml: an addendum (reads = {reads!r}) runs nothing, so it has no models; "
                "remove the models field"
            )
        unknown = [
            m for m in spec["findings"].get("read_before", []) if m not in by_name[reads].get("models", [])
        ]
        if unknown:
            raise SpecError(
                f"experiments/{stem}.toml: [findings] read_before names {', '.join(map(repr, unknown))}, "
                f"not a model of {reads!r}; name the models whose runs were read before the file was written"
            )


def spec_effects(spec: dict) -> list[dict]:
    """The spec's claimed effects, one per model: an effect with ``models = [...]`` is judged on each
    model apart (its label names the model); ``model = "..."`` names one."""
    out = []
    reads = spec["findings"].get("reads")
    for eff in spec["findings"].get("effects", []):
        if reads and "runs" not in eff:
            eff = dict(eff, runs=[reads])  # an addendum's effects are judged on the spec it reads
        models = eff.get("models")
        if not models:
            out.append(eff)
            continue
        for m in models:
            one = {k: v for k, v in eff.items() if k != "models"}
            out.append(dict(one, model=m, label=f"{short(m)}: {eff.get('label', '')}"))
    return out


def effect_rows(stem: str, spec: dict, runs: dict[str, Run]) -> list[dict]:
    out: list[dict[str, Any]] = []
    for eff in spec_effects(spec):
        try:
            res = evaluate_effect(eff, runs, where=f"experiments/{stem}.toml")
        except MeasureError as err:
            if any(r.spec == runs_spec(spec) for r in runs.values()):
                raise
            res = None  # a spec not yet run whose claim this version cannot read: listed as not measured
            print(f"findings: {err} (no run yet; listed as not measured)", file=sys.stderr)
        claim = (
            f"{spec.get('claim', '')} Claimed effect: {eff.get('label')}: "
            + (
                f"{eff.get('bound', '') + ' ' if eff.get('bound') else ''}"
                f"{'×' if eff.get('scale', 'ratio') == 'ratio' else ''}{eff['size']}"
                if "size" in eff
                else eff.get("direction", "")
            )
            + f" (a / b on the {eff.get('scale', 'ratio')} scale). Source: {eff.get('source', '')} Translation: {eff.get('translation', '')}"
            + prediction_note(stem, spec, res.run if res is not None else None)
        )
        if res is None:
            out.append(
                {
                    "observation": f"{spec['name']}: {eff.get('label')}",
                    "claim": claim,
                    "measured": "not measured: no committed run has both arms of this comparison (rerun needed)",
                    "verdict": "not measured",
                    "source": f"experiments/{stem}.toml",
                    "summary": f"{eff.get('label')}: not measured",
                }
            )
            continue
        models = [
            str({**eff.get("where", {}), **eff[k]}.get("model") or eff.get("model") or "") for k in "ab"
        ]
        out.append(
            {
                "observation": f"{spec['name']}: {eff.get('label')}",
                "claim": claim,
                "source": source([res.run]),
                "_result": res,
                "_check": instrument_check(eff, res),
                "_beside": competence_note(res.run, [m for m in models if m]) if organism_spec(spec) else "",
            }
        )
    return out


KEY_MEASURES = (
    "extra_key",
    "kind:invented+schema_word",
    "kind:invented",
    "kind:schema_word",
    "source_shaped",
)


def instrument_check(eff: dict, res: Any) -> str | None:
    """The instrument check an effect row is, if any: arm ``a`` decodes with the closed grammar (mode
    ``strict``, no open engine named) and the measure counts keys after newText, which that grammar
    cannot write. None for every other row."""
    a = {**eff.get("where", {}), **eff["a"]}
    if eff.get("level") != "L2" or a.get("mode") != "strict" or a.get("engine"):
        return None
    if eff.get("measure") not in KEY_MEASURES:
        return None
    written = (
        "no key" if res.cmp.mean_a == 0 else f"keys in {res.cmp.mean_a:.3f} of the draws (the check fails)"
    )
    return f"a closed grammar cannot write a key after newText; its arm wrote {written}"


def finish_effect_rows(rows: list[dict]) -> int:
    """Judge every effect row against its claim with Holm's correction across the family of effect
    rows that test a claim (instrument checks, interim rows and rows without an interval or a premise
    excluded); fill their measured, verdict and summary cells. Returns the family's size."""
    from tooldecode.stats import BY_CONSTRUCTION, INTERIM, PREMISE_ABSENT, by_construction, holm

    eff = [r for r in rows if "_result" in r]
    tested = [
        r
        for r in eff
        if r["_check"] is None
        and r["_result"].verdict.verdict not in (PREMISE_ABSENT, INTERIM)
        and not math.isnan(r["_result"].verdict.lo)
    ]
    adjusted = holm([r["_result"].cmp.p_sign_flip for r in tested])
    for r, padj in zip(tested, adjusted, strict=True):
        r["_result"] = r["_result"].rejudged(padj)
    for r in eff:
        res = r.pop("_result")
        check = r.pop("_check")
        if check is not None and res.verdict.verdict not in (PREMISE_ABSENT, INTERIM):
            res = dataclasses.replace(res, verdict=by_construction(res.verdict, check))
        r["measured"] = (
            res.measured()
            + f". Interval: {res.cmp.kind}; ratio: cluster-robust delta method."
            + r.pop("_beside", "")
        )
        r["verdict"] = str(res.verdict)
        r["summary"] = f"{res.label}: {res.short()}"
        r["result"] = res
        assert (
            res.verdict.verdict != "reproduces"
            or not res.claim.excludes(res.verdict.lo, res.verdict.hi)  # a bound ("at least ×3") included
        ), r["observation"]
        assert res.verdict.verdict != BY_CONSTRUCTION or "instrument check:" in r["verdict"]
    return len(tested)


def build_rows(runs: dict[str, Run], root: Path = ROOT) -> list[dict]:
    """Every row of FINDINGS.md, in suite order, then the corpus rows."""
    rows: list[dict] = []
    for stem, spec in load_specs(root):
        rs = runs_of(runs_spec(spec), runs)
        rows += effect_rows(stem, spec, runs)
        for name in spec["findings"].get("rows", []):
            if name not in ROWS:
                raise KeyError(
                    f"experiments/{stem}.toml: findings row {name!r} unknown; known: {', '.join(ROWS)}"
                )
            rows += ROWS[name](spec, rs, runs)
    zoo = row_zoo(runs)
    if zoo:
        rows.append(zoo)
    repair = row_repair(runs)
    if repair:
        rows.append(repair)
    rows.append(row_duplicates(runs))
    rows += construct_rows(load_specs(root), runs)
    FAMILY[0] = finish_effect_rows(rows)
    return rows


FAMILY = [0]  # the size of the last build's Holm family (for the preamble)


def provenance(runs: dict[str, Run]) -> str:
    """Which runs the table reads, their commit and whether the tree was dirty."""
    lines = []
    for r in sorted(runs.values(), key=lambda r: r.name):
        t = r.manifest.get("tooldecode", {})
        n = len(r.samples)
        lines.append(
            f"- `{r.name}` (spec {r.spec}): {n} samples, {len(r.probe)} probe rows; commit "
            f"{str(t.get('git_sha', '?'))[:10]}, git_dirty: {str(t.get('git_dirty')).lower()}"
        )
    return "\n".join(lines)


def reruns(rows: list[dict], runs: dict[str, Run], root: Path = ROOT) -> str:
    """What the table still needs, computed from the rows and the runs' manifests."""
    out = []
    dirty = sorted(r.name for r in runs.values() if r.git_dirty)
    if dirty:
        out.append(
            f"- Made from a tree with uncommitted changes (`git_dirty: true`), to be rerun from a clean commit: "
            f"{', '.join(dirty)}."
        )
    out.append(shared_streams_line(runs))  # empty when none (dropped below)
    missing = [r["observation"] for r in rows if r["verdict"] == "not measured"]
    if missing:
        out.append(f"- Claimed effects with no run that pairs both arms: {'; '.join(missing)}.")
    small = [
        str(i)
        for i, r in enumerate(rows, 1)
        if "fewer than 10 clusters" in r["measured"] and r["verdict"] != "not measured"
    ]
    if small:
        out.append(
            f"- Figures from fewer than 10 scenarios ({len(small)} rows: {', '.join(small)}): "
            "rerun over ≥ 18 scenarios."
        )
    for r in sorted(runs.values(), key=lambda r: r.name):
        want, short_by = r.expected_samples, r.missing_samples
        if r.samples and short_by:
            begun = len({s.scenario for s in r.samples})
            total = len(r.manifest.get("config", {}).get("scenarios", []))
            out.append(
                f"- {r.name}: {want - short_by} of {want} samples ({begun} of {total} scenarios begun); its figures "
                f"cover only those. Resume from its commit: `git worktree add DIR {r.git_sha[:10]}`, then in DIR "
                f"`{r.command()}` with this run folder at `runs/{r.name}`."
            )
    for stem, spec in load_specs(root):
        if "variants" in spec or spec.get("name", "").startswith(ENGINES_SPEC_PREFIX):
            continue  # the probe suites: below; E15's runs go one per model, see docs/engines.md
        want = spec.get("max_scenarios") or 36
        probe = spec.get("probe", {})
        # a probe-only spec's scenario is done when every variant (the product of its fields) has rows
        n_variants = math.prod(len(as_list(probe[f])) for f in probe.get("fields", []))
        decided = (  # a decision-only spec's scenarios per run and model, read once
            {
                run.name: {(r.model, r.scenario) for _, rs in decision_runs([run]) for r in rs}
                for run in runs_of(spec["name"], runs)
            }
            if spec.get("decision", {}).get("only")
            else {}
        )
        for m in spec.get("models", []):
            got = max(
                (
                    _probed_in_full(run.probe, m, n_variants)
                    if probe.get("only")
                    else sum(1 for model, _ in decided[run.name] if model == m)
                    if run.name in decided
                    else len({s.scenario for s in run.samples if s.arm.model == m})
                    for run in runs_of(spec["name"], runs)
                    if run.git_dirty is False
                ),
                default=0,
            )
            if got < want:
                out.append(
                    f"- {spec['name']} on {m}: {got} of {want} scenarios in a run from a clean commit "
                    f"(`tooldecode run experiments/{stem}.toml --out runs/{spec['name']}-{want}`)."
                )
    for stem, spec in load_specs(root):
        if "variants" not in spec:
            continue
        rs = runs_of(spec["name"], runs)
        for m in spec.get("models", []):
            mine = [r for r in rs if r.manifest.get("config", {}).get("model") == m]
            n = len({r.scenario for run in mine for r in run.probe})
            total = len(mine[0].manifest.get("config", {}).get("scenarios", [])) if mine else 36
            if mine and n < total:
                out.append(
                    f"- {spec['name']} on {m}: {n} of {total} scenarios probed (resume: `{mine[0].command()}`)."
                )
            elif not mine:
                out.append(
                    f"- {spec['name']} on {m}: not run (`tooldecode probe-suite experiments/{stem}.toml "
                    f"--out runs/{spec['name']}-{m} --model {m}`)."
                )
    return "\n".join(line for line in out if line)


def _probed_in_full(rows: list[ProbeRow], model: str, n_variants: int) -> int:
    """Scenarios whose probe rows for ``model`` cover ``n_variants`` variants (copies count: they are rows)."""
    labels: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        if r.model == model:
            labels[r.scenario].add(r.variant_label)
    return sum(len(v) >= n_variants for v in labels.values())


def summary(rows: list[dict]) -> str:
    """The README's short account, generated from the rows: every claimed effect measured (with its
    verdict) and the descriptive rows that carry a summary; effects not yet measured are counted."""
    lines: list[str] = []
    rest: Counter[str] = Counter()
    for i, (key, r) in enumerate(zip(row_keys(rows), rows, strict=True), 1):
        if "summary" not in r:
            continue
        verdict = str(r["verdict"])
        if verdict.startswith("not measured"):
            rest["not measured (no committed run pairs both arms)"] += 1
            continue
        lines.append(f"- {r['summary']} (FINDINGS [row {i}](FINDINGS.md#{key}))")
    tail = ", ".join(f"{n} {k}" for k, n in sorted(rest.items()))
    if tail:
        lines.append(f"- Other claimed effects: {tail}; FINDINGS lists what remains to rerun.")
    return "\n".join(lines)


COLUMNS = ("observation", "claim", "measured", "verdict", "source")

# A hand-written citation of a FINDINGS row: ``[row 95](../FINDINGS.md#r3fa2c1)``. The key is the row's
# stable name (``row_keys``), the number is where the row stands in this build (``cite_rows`` renumbers).
CITATION = re.compile(r"\[row (\d+)\]\(((?:\.\./)?FINDINGS\.md)#(r[0-9a-f]{6}(?:-\d+)?)\)")


def row_keys(rows: list[dict]) -> list[str]:
    """Each row's stable key: ``r`` and 6 hex digits of the SHA-1 of its observation, so the key does not
    move when rows are added before it, when its figures change or when more runs feed it. Rows that share
    an observation (one row a run: strict's cost, the construct) add the first run their source names;
    rows that share both get ``-2``, ``-3``, … in order."""
    shared = Counter(str(r.get("observation", "")) for r in rows)
    keys, seen = [], Counter[str]()
    for r in rows:
        basis = str(r.get("observation", ""))
        if shared[basis] > 1:
            basis += "\n" + re.split(r"[\s,+]", str(r.get("source", "")), maxsplit=1)[0]
        key = "r" + hashlib.sha1(basis.encode()).hexdigest()[:6]
        seen[key] += 1
        keys.append(key if seen[key] == 1 else f"{key}-{seen[key]}")
    return keys


def cite_rows(text: str, rows: list[dict], where: str) -> str:
    """``text`` with every citation ``[row N](FINDINGS.md#KEY)`` renumbered to where the row with KEY
    stands in ``rows``. A key no row has is an error (``where`` names the file): the cited row is gone or
    was renamed, so the citation must be checked by hand."""
    number = {k: i for i, k in enumerate(row_keys(rows), 1)}

    def renumber(m: re.Match[str]) -> str:
        old, path, key = m.groups()
        if key not in number:
            raise SystemExit(
                f"{where}: cites FINDINGS row {old} by the key {key}, which no row has now; find that row "
                "in FINDINGS.md by its content and cite its key (shown as the row's anchor)"
            )
        return f"[row {number[key]}]({path}#{key})"

    return CITATION.sub(renumber, text)


def write_findings(rows: list[dict[str, str]], out: Path, *, preamble: str = "", header: str = "") -> Path:
    """Write ``rows`` (dicts with the ``COLUMNS``) as a markdown table after ``preamble``."""
    head = header or (
        "| # | observation | claim (claimed effect; how it was translated) | measured (n, scenarios, interval) "
        "| verdict | runs |"
    )
    lines = ["# Findings", "", preamble.strip(), "", head, "|---|---|---|---|---|---|"]
    for i, (key, r) in enumerate(zip(row_keys(rows), rows, strict=True), 1):
        cells = [f'{i} <a id="{key}"></a>'] + [
            str(r.get(k, "")).replace("|", "\\|").replace("\n", " ") for k in COLUMNS
        ]
        lines.append("| " + " | ".join(cells) + " |")
    out.write_text("\n".join(lines) + "\n")
    return out


__all__ = [
    "ROWS",
    "build_rows",
    "cite_rows",
    "load_specs",
    "provenance",
    "reruns",
    "row_keys",
    "runs_spec",
    "spec_effects",
    "summary",
    "write_findings",
]
