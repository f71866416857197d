"""The rejection reference: loose samples replayed through the strict grammar (exact draws of P_L)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tooldecode.distortion.weights import MASKED_MODES, grammar_mode

# ---------------------------------------------------------------------------------------------
# the rejection reference: loose samples replayed through the strict grammar


def replay_status(matcher: Any, token_ids: Sequence[int], eog: frozenset[int], finish_reason: str) -> str:
    """Replay one loose sample's tokens through a fresh strict-grammar matcher.

    Returns ``valid`` (every token allowed, ending with a stop token where the grammar may end),
    ``valid-prefix`` (every token allowed and the sample was cut at the token cap: the masked
    sampler would have been cut at the same point), ``invalid@<t>`` (token t is not allowed: the
    strict arm never produces this sample) or ``stop-string`` (ended on a stop string, not a stop
    token; counted invalid: the masked sampler stops on stop tokens)."""
    for t, tok in enumerate(token_ids):
        allowed = matcher.allowed()
        if matcher.done():
            allowed = np.zeros_like(allowed)
            allowed[list(eog)] = True
        if not allowed[int(tok)]:
            return f"invalid@{t}"
        if int(tok) in eog:
            return "valid"
        matcher.accept(int(tok))
    return "valid-prefix" if finish_reason == "length" else "stop-string"


def reference_validity(run_dir: str | Path, *, backend: Any | None = None) -> dict[str, dict[str, str]]:
    """Replay status (``replay_status``) of every loose sample of a run under the grammar of each
    masked mode the run has: ``{grammar mode: {sample key: status}}``.

    Cached in the run directory as ``reference-validity.json`` (derived, keyed by the grammar's hash).
    Loads the run's model (vocabulary and tokenizer) unless ``backend`` is given.
    """
    import dataclasses
    import hashlib

    from tooldecode.grammar import render_toolset
    from tooldecode.masking import compile_mask
    from tooldecode.models import resolve
    from tooldecode.prompts import TranscriptOptions, render_prompt
    from tooldecode.runs import RunStore
    from tooldecode.scenarios import get_scenario

    path = Path(run_dir)
    option_fields = {f.name for f in dataclasses.fields(TranscriptOptions)}
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
    backends: dict[tuple[str, str], Any] = {}
    out: dict[str, dict[str, str]] = {m: {} for m in modes}
    grammars: dict[tuple, tuple[str, Any]] = {}
    changed = False
    try:
        for gmode, s in ((m, s) for m in modes for s in samples):
            arm = s["arm"]
            opts = TranscriptOptions(**{k: arm[k] for k in option_fields if k in arm})
            gkey = (
                gmode,
                arm["model"],
                s["scenario"],
                json.dumps(opts.__dict__, sort_keys=True, default=str),
            )
            if gkey not in grammars:
                ref = resolve(arm["model"])
                prompt = render_prompt(get_scenario(s["scenario"]), ref, opts)
                g = render_toolset(list(prompt.tools), format="gbnf", wire=prompt.wire, mode=gmode, ws=ws)
                grammars[gkey] = (
                    hashlib.sha256((g + "\0" + prompt.prefill).encode()).hexdigest()[:16],
                    (g, prompt),
                )
            ghash, (g, prompt) = grammars[gkey]
            ckey = f"{gmode}:{s['key']}"
            hit = cache.get(ckey)
            if hit and hit.get("grammar") == ghash:
                out[gmode][s["key"]] = hit["status"]
                continue
            bkey = (arm.get("backend", "llamacpp"), arm["model"])
            be = backend
            if be is None:
                if bkey not in backends:
                    from tooldecode.backends import load_backend

                    kw = {"n_ctx": 512} if bkey[0] == "llamacpp" else {}
                    backends[bkey] = load_backend(bkey[0], resolve(arm["model"], fetch=True), **kw)
                be = backends[bkey]
            mask = compile_mask("xgrammar", g, be)  # acceptance is the grammar's, whichever engine sampled
            status = replay_status(
                mask.matcher(prompt.prefill), s["token_ids"], be.eog_ids, s["finish_reason"]
            )
            out[gmode][s["key"]] = status
            cache[ckey] = {"grammar": ghash, "status": status}
            changed = True
    finally:
        for be in backends.values():
            be.close()
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
