"""Run folders: what ``--fresh`` may delete, refusing to resume onto other weights, removing a run that never started."""

from __future__ import annotations

import json
from pathlib import Path

from tooldecode.experiments.spec import SpecError


def is_run_dir(path: Path) -> bool:
    """A directory holding a manifest written by tooldecode (the only kind ``--fresh`` may delete)."""
    from tooldecode.runs import MANIFEST, SAMPLES

    mpath = path / MANIFEST
    if not (path.is_dir() and mpath.is_file() and (path / SAMPLES).is_file()):
        return False
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and {"format", "config", "tooldecode"} <= set(manifest)


def remove_run(out: Path) -> None:
    """``--fresh``: delete the run at ``out``, refusing anything that is not a tooldecode run."""
    import shutil

    if not out.exists():
        return
    if not is_run_dir(out):
        raise RunStoreRefusal(
            f"--fresh refuses to delete {out}: it is not a tooldecode run directory (no manifest written by "
            "tooldecode); choose another --out or remove it yourself"
        )
    shutil.rmtree(out)


class RunStoreRefusal(SpecError):
    """An output folder that tooldecode will not touch."""


def check_models_match(out: Path, models_info: dict[str, dict]) -> None:
    """Refuse to resume a run whose stored weights hash differs from the weights loaded now."""
    from tooldecode.runs import MANIFEST

    mpath = out / MANIFEST
    if not mpath.is_file():
        return
    try:
        stored = json.loads(mpath.read_text(encoding="utf-8")).get("model")
    except (OSError, ValueError, AttributeError, RecursionError):
        return  # RunStore.create reports the corrupt manifest
    if not isinstance(stored, dict):
        return
    by_id = {stored["id"]: stored} if "id" in stored else stored
    for name, now in models_info.items():
        before = by_id.get(now["id"]) or by_id.get(name)
        if isinstance(before, dict) and before.get("sha256") and before["sha256"] != now["sha256"]:
            raise RunStoreRefusal(
                f"run {out} was sampled from '{name}' with sha256 {str(before['sha256'])[:12]}…, but the weights "
                f"at {now['path']} hash to {now['sha256'][:12]}…; resuming would mix two models' samples: "
                "restore those weights or use a new --out"
            )


def check_scenarios_match(out: Path, scenarios: dict[str, str]) -> None:
    """Refuse to resume a run where a scenario it samples has changed since (its sha256 differs)."""
    from tooldecode.runs import MANIFEST

    try:
        stored = json.loads((out / MANIFEST).read_text(encoding="utf-8")).get("scenarios")
    except (OSError, ValueError, AttributeError, RecursionError):
        return  # no run there, or RunStore.create reports the corrupt manifest
    if not isinstance(stored, dict):
        return
    for sid, now in scenarios.items():
        before = stored.get(sid)
        if isinstance(before, str) and before != now:
            raise RunStoreRefusal(
                f"run {out} sampled scenario {sid} with sha256 {before[:12]}…, but it now hashes to "
                f"{now[:12]}… (its file changed); resuming would mix two versions of it: restore the "
                "scenario, or start again with --fresh or a new --out"
            )


def discard_empty_run(out: Path, *, remove_dir: bool) -> None:
    """Remove the manifest and empty samples file of a run that failed before its first sample."""
    from tooldecode.runs import MANIFEST, SAMPLES

    for name in (MANIFEST, SAMPLES):
        (out / name).unlink(missing_ok=True)
    if remove_dir:
        try:
            out.rmdir()  # only if nothing else is in it
        except OSError:
            pass
