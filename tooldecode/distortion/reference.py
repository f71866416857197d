"""The rejection reference: loose samples replayed through the strict grammar (exact draws of P_L)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tooldecode.distortion.weights import MASKED_MODES, grammar_mode

# ---------------------------------------------------------------------------------------------
# the rejection reference: loose samples replayed through the strict grammar


def reference_validity(run_dir: str | Path, *, backend: Any | None = None) -> dict[str, dict[str, str]]:
    """Replay status (``tooldecode.trial.replay_status``) of every loose sample of a run under the grammar of each
    masked mode the run has: ``{grammar mode: {sample key: status}}``.

    Cached in the run directory as ``reference-validity.json`` (derived, keyed by the grammar's hash).
    Loads the run's model (vocabulary and tokenizer) unless ``backend`` is given.
    """
    import hashlib

    from tooldecode.models import resolve
    from tooldecode.runs import RunStore
    from tooldecode.scenarios import get_scenario
    from tooldecode.trial import ModelCache, Trial

    path = Path(run_dir)
    store = RunStore.open(path)
    manifest = store.manifest
    samples = [s for s in store.sample_records() if s["arm"].get("mode") == "loose" and not s.get("error")]
    store.close()
    cache_path = path / "reference-validity.json"
    cache: dict[str, Any] = {}
    if cache_path.exists():
        try:
            cache = json.loads(cache_path.read_text())
        except ValueError:
            cache = {}
    ws = manifest.get("config", {}).get("ws", "bounded")
    modes = sorted(
        {
            grammar_mode(a["mode"])
            for a in manifest.get("config", {}).get("arms", [])
            if a.get("mode") in MASKED_MODES
        }
    )
    out: dict[str, dict[str, str]] = {m: {} for m in modes}
    trials: dict[tuple, Trial] = {}
    changed = False
    # the replay reads only the vocabulary and the tokenizer: every model stays loaded, in a small context
    with ModelCache(evaluates=False, keep_all=True) as models:
        for gmode, s in ((m, s) for m in modes for s in samples):
            arm = s["arm"]
            trial_mode = "strict-spec" if gmode == "spec" else "strict"
            tkey = (arm["model"], s["scenario"], json.dumps(arm, sort_keys=True, default=str))
            if tkey not in trials:
                trials[tkey] = Trial(arm, get_scenario(s["scenario"]), ref=resolve(arm["model"]), ws=ws)
            trial = trials[tkey]
            g = trial.grammar(trial_mode)
            ghash = hashlib.sha256((g + "\0" + trial.prompt.prefill).encode()).hexdigest()[:16]
            ckey = f"{gmode}:{s['key']}"
            hit = cache.get(ckey)
            if hit and hit.get("grammar") == ghash:
                out[gmode][s["key"]] = hit["status"]
                continue
            be = backend if backend is not None else models.get(arm.get("backend", "llamacpp"), arm["model"])
            status = trial.replay(be, s["token_ids"], s["finish_reason"], mode=trial_mode)
            out[gmode][s["key"]] = status
            cache[ckey] = {"grammar": ghash, "status": status}
            changed = True
    if changed:
        tmp = cache_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache, sort_keys=True) + "\n")
        tmp.replace(cache_path)
    return out


def cached_validity(run_dir: str | Path) -> dict[str, dict[str, str]] | None:
    """The replay statuses stored by an earlier ``reference_validity`` (no model load), or None."""
    path = Path(run_dir) / "reference-validity.json"
    if not path.exists():
        return None
    try:
        cache = json.loads(path.read_text())
    except ValueError:
        return None
    out: dict[str, dict[str, str]] = {}
    for ckey, hit in cache.items():
        mode, _, key = ckey.partition(":")
        out.setdefault(mode, {})[key] = hit["status"]
    return out


def has_masked_arm(manifest: dict) -> bool:
    """Whether a run's config has a masked (strict) arm."""
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    arms = config.get("arms") if isinstance(config.get("arms"), list) else []
    return any(isinstance(a, dict) and a.get("mode") in MASKED_MODES for a in arms)
