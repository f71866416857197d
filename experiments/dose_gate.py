"""The positive control's dose rule as a gate for the queue (``experiments/queue.toml``, a job's ``when``).

    python -m experiments.dose_gate next g2-positive-control-d10      # the rule still needs this dose
    python -m experiments.dose_gate chosen g2-positive-control-d05    # the rule chose this dose
    python -m experiments.dose_gate epochs experiments/organisms/g2-lenient-flat-flag.toml
                                                                      # the recipe trains the rule's epochs

It reads the rule committed in ``experiments/e19_organisms_gen2.toml`` (the prediction whose judge is
``dose_rule``) on the spec's runs under ``--runs`` (model by model runs read as one, as FINDINGS reads
them: ``experiments.organism_rows.dose_reading``) and exits

- 0: run the job;
- 1: skip it (the rule no longer needs it), one line on standard output says why;
- 2: stop the queue (the rule cannot be read yet, or a recipe disagrees with it), one line on standard
  error says what and what to do.

``next DOSE``: every dose before ``DOSE`` is measured and none was chosen (the rule reads the doses in
order); skip once an earlier dose is chosen or the base writes the key. ``chosen DOSE``: the rule chose
``DOSE``; skip when it chose another or none qualifies. ``epochs RECIPE``: the rule is decided and the
recipe's ``[train] epochs`` are the ones it sets (the chosen dose's; 1 when no dose qualifies).
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from experiments.organism_rows import DoseReading, dose_reading, dose_rule_of
from tooldecode.errors import ToolDecodeError
from tooldecode.runs import MANIFEST, Run, load_run

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "experiments" / "e19_organisms_gen2.toml"
RUN, SKIP, STOP = 0, 1, 2


class GateError(Exception):
    """What keeps the gate from reading the rule (the queue stops with it)."""


def _spec(path: Path) -> tuple[dict, dict]:
    try:
        spec = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise GateError(f"{path}: not a readable spec ({err}); name the e19 spec") from None
    rule = dose_rule_of(spec)
    if rule is None:
        raise GateError(f'{path}: no prediction with judge = "dose_rule"; name the e19 spec')
    return spec, rule


def spec_runs(runs_dir: Path, name: str) -> list[Run]:
    """The runs under ``runs_dir`` made from the spec ``name`` (only their manifests are read first)."""
    import json

    out = []
    for p in sorted(runs_dir.iterdir()) if runs_dir.is_dir() else []:
        m = p / MANIFEST
        if not m.is_file():
            continue
        try:
            spec = json.loads(m.read_text(encoding="utf-8")).get("config", {}).get("spec", p.name)
        except (OSError, json.JSONDecodeError):
            continue  # load_run names a damaged manifest when the run is read; this one is not the spec's
        if spec == name:
            out.append(load_run(p))
    return out


def _dose_index(reading: DoseReading, recipe: str) -> int:
    for k, (org, *_rest) in enumerate(reading.doses):
        if org.startswith(f"organism:{recipe}@"):
            return k
    names = ", ".join(_recipe_name(org) for org, *_ in reading.doses)
    raise GateError(f"{recipe!r} is not one of the rule's doses ({names}); name one of them")


def _recipe_name(org: str) -> str:
    return org.split(":", 1)[1].split("@", 1)[0]


def gate(reading: DoseReading | None, what: str, arg: str) -> tuple[int, str]:
    """(exit code, the line that says why) for ``what`` in ``next``, ``chosen``, ``epochs``."""
    if reading is None or reading.state == "unmeasured":
        return STOP, (
            "the dose rule has no L2 loose draws of the base yet: run the base's screen first (the queue's "
            "order)"
        )
    state = reading.state
    if what == "epochs":
        try:
            recipe = tomllib.loads(Path(arg).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as err:
            return STOP, f"{arg}: not a readable recipe ({err}); name a recipe file"
        has = int(recipe.get("train", {}).get("epochs", 1))
        want = reading.contrast_epochs
        if want is None:
            return STOP, (
                f"the dose rule is undecided ({_recipe_name(str(reading.undecided))} has no L2 loose draws): "
                f"{arg} trains only after it is read; run the dose ladder first"
            )
        if has != want:
            return STOP, (
                f"{arg} trains {has} epoch(s) but the dose rule sets {want}: set [train] epochs = {want}, "
                "commit, and resume the queue"
            )
        return RUN, f"{arg} trains the {want} epoch(s) the dose rule sets"
    k = _dose_index(reading, arg)
    if state == "base-writes":
        return (
            SKIP,
            f"the base writes {reading.key!r}: no dose measures the implant alone; {arg} is not needed",
        )
    if what == "chosen":
        if state == "undecided":
            return STOP, f"the dose rule is undecided ({_recipe_name(str(reading.undecided))} has no draws)"
        if state == "chosen" and reading.chosen == k:
            return RUN, f"the dose rule chose {arg}"
        chosen = (
            "no dose qualifies"
            if reading.chosen is None
            else f"it chose {_recipe_name(reading.doses[reading.chosen][0])}"
        )
        return SKIP, f"the dose rule did not choose {arg}: {chosen}"
    # next
    if state == "chosen" and reading.chosen is not None and reading.chosen < k:
        return SKIP, f"the dose rule chose {_recipe_name(reading.doses[reading.chosen][0])}, before {arg}"
    first_unmeasured = next((j for j, d in enumerate(reading.doses) if d[3].n == 0), None)
    if first_unmeasured is not None and first_unmeasured < k:
        return STOP, (
            f"{_recipe_name(reading.doses[first_unmeasured][0])} comes before {arg} and has no L2 loose draws; "
            "the rule reads the doses in order: screen it first"
        )
    return RUN, f"every dose before {arg} is measured and none was chosen"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.dose_gate", description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("next", "chosen", "epochs"))
    p.add_argument("arg", help="a dose's recipe name (next, chosen) or a recipe file (epochs)")
    p.add_argument("--runs", type=Path, default=Path("runs"), help="the runs folder (default: runs)")
    p.add_argument("--spec", type=Path, default=SPEC, help="the spec that holds the rule")
    args = p.parse_args(argv)
    try:
        spec, rule = _spec(args.spec)
        reading = dose_reading(rule, spec_runs(args.runs, str(spec["name"])))
        code, why = gate(reading, args.what, args.arg)
    except (GateError, ToolDecodeError) as err:
        code, why = STOP, str(err)
    print(f"dose_gate: {why}", file=sys.stderr if code == STOP else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
