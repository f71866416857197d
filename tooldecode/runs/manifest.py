"""Provenance of a run: the manifest's config plus the package version, git commit (and whether the tree
was clean), library versions, platform and time (``build_manifest``; the run store writes it)."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import re

from tooldecode import __version__
from tooldecode.provenance import cpu, git_state

__all__ = [
    "FORMAT_VERSION",
    "build_manifest",
    "effective_config",
    "narrowed_aligned",
    "narrowed_config",
    "narrowed_n_by_mode",
    "with_resume",
]

FORMAT_VERSION = 1

_LIBRARIES = {
    "numpy": "numpy",
    "torch": "torch",
    "transformers": "transformers",
    "llama_cpp": "llama-cpp-python",
    "xgrammar": "xgrammar",
    "llguidance": "llguidance",
    "outlines": "outlines",
}


# --- manifest --------------------------------------------------------------------------------------


def _library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name, dist in _LIBRARIES.items():
        try:
            out[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _environment() -> dict[str, str]:
    """The ``TOOLDECODE_*`` settings of this process (a name that may hold a credential is left out)."""
    return {
        k: v
        for k, v in sorted(os.environ.items())
        if k.startswith("TOOLDECODE_") and not re.search(r"KEY|TOKEN|SECRET|PASS|AUTH", k)
    }


def build_manifest(
    config: dict,
    *,
    model: dict | None = None,
    seeds: list[int] | None = None,
    scenarios: dict[str, str] | None = None,
) -> dict:
    """A manifest for ``RunStore.create``: the config plus provenance.

    ``model`` is ``{"id", "sha256", "path"}``; ``scenarios`` maps scenario id to content hash.
    Library versions come from package metadata (nothing heavy is imported). ``environment`` holds the
    ``TOOLDECODE_*`` variables set when the run started (the prompt KV store, batch and thread
    settings): what ran, even where it cannot change a draw.
    """
    sha, dirty = git_state()
    return {
        "format": FORMAT_VERSION,
        "config": config,
        "tooldecode": {"version": __version__, "git_sha": sha, "git_dirty": dirty},
        "python": platform.python_version(),
        "libraries": _library_versions(),
        "platform": platform.platform(),
        "cpu": cpu(),
        "environment": _environment(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "model": model,
        "seeds": seeds,
        "scenarios": scenarios,
    }


def with_resume(
    stored: dict, incoming: dict, n_by_mode: dict | None = None, aligned: dict | None = None
) -> dict | None:
    """``stored`` with the commit of ``incoming`` (a resume's manifest) added to its ``resumed`` list, or
    None when that commit is the run's own or already listed, on the same CPU (``provenance.cpu``), and
    the draws asked for are unchanged. A commit counts with its ``git_dirty``, and a CPU with its vector
    instruction sets, so a run's rows name every commit and every kind of CPU that wrote some.

    ``n_by_mode``: the resume's draws per mode and level where an amendment narrowed them
    (``narrowed_n_by_mode``); ``aligned``: its strict-aligned sampler where an amendment narrowed the
    budget (``narrowed_aligned``); the entry keeps each, and ``effective_config`` reads the last."""
    new = incoming.get("tooldecode") or {}
    first = stored.get("tooldecode") or {}
    here = {"git_sha": new.get("git_sha"), "git_dirty": new.get("git_dirty")}
    seen = list(stored.get("resumed") or [])
    now = effective_config(stored)
    changes_n = n_by_mode is not None and n_by_mode != now.get("n_by_mode", {})
    changes_aligned = aligned is not None and aligned != now.get("aligned", {})
    # a resume on another CPU is recorded even from the run's own commit: its kernels can draw otherwise
    cpu_now, cpu_first = incoming.get("cpu"), stored.get("cpu")
    if (
        not changes_n
        and not changes_aligned
        and (
            (here == {k: first.get(k) for k in here} and cpu_now == cpu_first)
            or any({k: e.get(k) for k in here} == here and e.get("cpu", cpu_first) == cpu_now for e in seen)
        )
    ):
        return None
    entry = {**here, "at": incoming.get("created")}
    if cpu_now is not None:
        entry["cpu"] = cpu_now
    if incoming.get("environment") is not None:
        entry["environment"] = incoming["environment"]
    if changes_n:
        entry["n_by_mode"] = n_by_mode
    if changes_aligned:
        entry["aligned"] = aligned
    return {**stored, "resumed": [*seen, entry]}


def effective_config(manifest: dict) -> dict:
    """The config a run asks for now: the stored ``config`` with the draws per mode and level of the last
    resume that narrowed them (``resumed[].n_by_mode``; a dated amendment of the spec that draws fewer of
    an arm, each kept draw being its stream's first) and the strict-aligned sampler of the last resume
    that narrowed its budget (``resumed[].aligned``)."""
    config = dict(manifest.get("config") or {})
    for entry in manifest.get("resumed") or ():
        for key in ("n_by_mode", "aligned"):
            if key in entry:
                config[key] = entry[key]
    return config


def narrowed_aligned(stored: dict | None, incoming: dict | None) -> dict | None:
    """``incoming``'s strict-aligned sampler (a spec's ``[aligned]``) when it differs from ``stored`` only
    in a smaller budget (``max_rounds`` no larger, ``max_walk_tokens`` set or no larger), else None.

    An adaptive sampler's accepted output is an exact draw of its target whatever the budget; a smaller
    budget only abandons (as error records) outputs that would have taken longer, so the draws made under
    the larger one stay what they are."""
    old, new = dict(stored or {}), dict(incoming or {})
    if old.get("method") != "adaptive" or new.get("method") != "adaptive":
        return None
    rest = ("max_rounds", "max_walk_tokens")
    if {k: v for k, v in old.items() if k not in rest} != {k: v for k, v in new.items() if k not in rest}:
        return None
    if int(new.get("max_rounds", 64)) > int(old.get("max_rounds", 64)):
        return None
    if "max_walk_tokens" in old and int(new.get("max_walk_tokens", 1 << 62)) > int(old["max_walk_tokens"]):
        return None
    return new


def narrowed_config(stored: dict, incoming: dict) -> dict | None:
    """What a resume's config narrows, ``{"n_by_mode": ..., "aligned": ...}``, when two run configs
    differ in those two fields alone, the draws per arm no more (``narrowed_n_by_mode``) and the
    strict-aligned budget no larger (``narrowed_aligned``), else None."""
    keys = ("n_by_mode", "aligned")
    if {k: v for k, v in stored.items() if k not in keys} != {
        k: v for k, v in incoming.items() if k not in keys
    }:
        return None
    n = narrowed_n_by_mode(stored, incoming)
    if n is None:
        return None
    out: dict = {"n_by_mode": n}
    if stored.get("aligned") != incoming.get("aligned"):
        aligned = narrowed_aligned(stored.get("aligned"), incoming.get("aligned"))
        if aligned is None:
            return None
        out["aligned"] = aligned
    return out


def narrowed_n_by_mode(stored: dict, incoming: dict) -> dict | None:
    """``incoming``'s ``n_by_mode`` when it asks no arm of ``stored`` (the config the run was made with)
    for more draws than ``stored`` does, else None (``narrowed_config`` checks that nothing else differs).
    Each draw of an arm comes from its scenario's own stream, index by index, so drawing fewer changes no
    draw that is made."""
    from tooldecode.records import samples_per_arm

    old, new = stored.get("n_by_mode") or {}, incoming.get("n_by_mode") or {}
    n = int(stored.get("n") or 0)
    for arm in stored.get("arms") or ():
        mode, level = arm.get("mode"), arm.get("level")
        if samples_per_arm(new, n, mode, level) > samples_per_arm(old, n, mode, level):
            return None
    return dict(new)
