"""Exact-probe suite: P(close) / P(continue by kind) after newText for transcript variants and views of
the tool block, over the scenario corpus, as one resumable run directory.

The spec (``experiments/p*.toml``) names the models, the variants (transcript options plus an optional
``tool_view`` of the edit tool as shown in the prompt) and the probe bounds. Scenarios run in a fixed
shuffled order (seeded), every variant of a scenario before the next scenario, so a run stopped early
holds paired data over a random subset of the corpus. Variants whose prompts render byte-identically
for a scenario are probed once; the row of the copy records ``same_prompt_as``. Raw rows are appended
to ``probe.jsonl`` (never rewritten); a rerun skips what is there.

Tool views (the edit tool's JSON line in the prompt is replaced; everything else stays byte-equal):

- ``as-written``: unchanged;
- ``required-first``: ``required`` moved before ``properties`` in every object schema;
- ``no-required``: ``required`` removed from every object schema;
- ``typescript``: the tool as a TypeScript-style signature (as harmony renders tools) instead of JSON.

    python scripts/probe_suite.py experiments/p1_echo_variants.toml --out runs/p1-echo-variants-0.5b \\
        --model qwen2.5-coder-0.5b-instruct [--max-scenarios N] [--hours H]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import random
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from tooldecode.errors import ToolDecodeError

VIEWS = ("as-written", "required-first", "no-required", "typescript")


class SuiteError(ToolDecodeError):
    """A probe-suite spec or run that cannot be used as asked."""


def _tool_form(tool: Any) -> dict:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def _walk_objects(schema: Any, fn) -> Any:
    if isinstance(schema, dict):
        out = {k: _walk_objects(v, fn) for k, v in schema.items()}
        return fn(out) if "properties" in out else out
    if isinstance(schema, list):
        return [_walk_objects(v, fn) for v in schema]
    return schema


def _required_first(obj: dict) -> dict:
    if "required" not in obj:
        return obj
    out = {}
    for k, v in obj.items():
        if k == "properties":
            out["required"] = obj["required"]
        if k != "required":
            out[k] = v
    return out


def _no_required(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k != "required"}


def _ts_type(schema: Any, indent: str) -> str:
    if not isinstance(schema, dict):
        return "any"
    t = schema.get("type")
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if t == "array":
        inner = _ts_type(schema.get("items", {}), indent)
        return f"{inner}[]" if not inner.startswith("{") else f"Array<{inner}>"
    if t == "object" or "properties" in schema:
        req = set(schema.get("required", []))
        lines = ["{"]
        for name, sub in schema.get("properties", {}).items():
            desc = sub.get("description") if isinstance(sub, dict) else None
            if desc:
                lines.append(f"{indent}  // {desc}")
            opt = "" if name in req else "?"
            lines.append(f"{indent}  {name}{opt}: {_ts_type(sub, indent + '  ')},")
        lines.append(indent + "}")
        return "\n".join(lines)
    return {"integer": "number", "number": "number", "string": "string", "boolean": "boolean"}.get(
        str(t), "any"
    )


def typescript_signature(tool: Any) -> str:
    """The tool as a TypeScript-style declaration (harmony's way of showing a tool)."""
    return f"// {tool.description}\ntype {tool.name} = (_: {_ts_type(tool.parameters, '')}) => any;"


def _view_form(tool: Any, view: str) -> dict:
    form = copy.deepcopy(_tool_form(tool))
    if view in ("required-first", "no-required"):
        fn = _required_first if view == "required-first" else _no_required
        form["function"]["parameters"] = _walk_objects(form["function"]["parameters"], fn)
    return form


def apply_view(prompt_text: str, tools: Any, edit_tool: str, view: str) -> tuple[str, list]:
    """``prompt_text`` with every tool's JSON line shown as ``view`` (see the module docstring), and the
    tool forms that classify keys (the JSON forms as shown; for ``typescript`` the forms as written)."""
    if view not in VIEWS:
        raise SuiteError(f"tool_view {view!r} is not one of {', '.join(VIEWS)}")
    if view == "as-written":
        return prompt_text, list(tools)
    if not any(t.name == edit_tool for t in tools):
        raise SuiteError(f"tool {edit_tool!r} is not offered in the prompt; tool_view needs it")
    forms = []
    for tool in tools:
        line = json.dumps(_tool_form(tool), ensure_ascii=False)
        if line not in prompt_text:
            raise SuiteError(
                f"the prompt does not show tool {tool.name!r} as one JSON line; tool_view {view!r} applies "
                "to templates that do (Qwen2.5)"
            )
        if view == "typescript":
            new = typescript_signature(tool)
            forms.append(_tool_form(tool))
        else:
            form = _view_form(tool, view)
            new = json.dumps(form, ensure_ascii=False)
            forms.append(form)
        prompt_text = prompt_text.replace(line, new)
    return prompt_text, forms


def _item_index(items: str, k: int, n_items: int) -> int:
    if items == "last":
        return n_items - 1
    if items == "first-last":
        return k if k == 0 or n_items <= 2 else n_items - 1
    return k


def load_suite(path: Path) -> dict:
    try:
        spec = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SuiteError(f"probe-suite spec {path} not found") from None
    except tomllib.TOMLDecodeError as err:
        raise SuiteError(f"{path}: invalid TOML ({err})") from None
    for key in ("name", "variants"):
        if key not in spec:
            raise SuiteError(f"{path}: missing field {key!r}")
    for v in spec["variants"]:
        if "name" not in v:
            raise SuiteError(f"{path}: every [[variants]] entry needs a name")
        if v.get("tool_view", "as-written") not in VIEWS:
            raise SuiteError(f"{path}: variant {v['name']}: tool_view must be one of {', '.join(VIEWS)}")
    return spec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec")
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--max-scenarios", type=int, default=None)
    ap.add_argument("--hours", type=float, default=None, help="stop after this long (resume later)")
    args = ap.parse_args(argv)

    from tooldecode.backends import load_backend
    from tooldecode.models import resolve
    from tooldecode.probe import ProbeConfig, probe_call
    from tooldecode.prompts import TranscriptOptions, gold_call_text, render_prompt
    from tooldecode.runs import RunStore, build_manifest
    from tooldecode.scenarios import load_scenarios

    spec_path = Path(args.spec)
    spec = load_suite(spec_path)
    scenarios = sorted(load_scenarios(), key=lambda s: s.id)
    random.Random(int(spec.get("order_seed", 0))).shuffle(scenarios)
    if args.max_scenarios:
        scenarios = scenarios[: args.max_scenarios]
    pcfg = spec.get("probe", {})
    cfg = ProbeConfig(
        depth=int(pcfg.get("depth", 3)),
        key_depth=int(pcfg.get("key_depth", 4)),
        min_mass=float(pcfg.get("min_mass", 1e-3)),
        max_branches=int(pcfg.get("max_branches", 16)),
        tail=float(pcfg.get("tail", 1e-4)),
    )
    ref = resolve(args.model, fetch=True)
    config = {
        "spec": spec["name"],
        "suite": "probe",
        "model": args.model,
        "variants": spec["variants"],
        "scenarios": [s.id for s in scenarios],
        "order_seed": int(spec.get("order_seed", 0)),
        "probe": {**pcfg, **cfg.__dict__},
        "select": spec.get("select", "newText"),
    }
    manifest = build_manifest(
        config,
        model={"id": ref.id, "sha256": ref.digest(), "path": str(ref.path)},
        scenarios={s.id: s.sha256() for s in scenarios},
    )
    manifest["claim"] = spec.get("claim", "")
    manifest["description"] = spec.get("description", "")
    manifest["command"] = f"python scripts/probe_suite.py {args.spec} --out {args.out} --model {args.model}"
    out = Path(args.out)
    store = RunStore.create(out, manifest)
    probe_path = out / "probe.jsonl"
    have: set[tuple[str, str]] = set()
    if probe_path.exists():
        for line in probe_path.read_text().splitlines():
            if line.strip():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line: redone below
                have.add((r["variant_label"], r["scenario"]))
    store.close()
    be = load_backend("llamacpp", ref, n_ctx=8192, max_seqs=cfg.max_branches + 1)
    t0 = time.time()
    for sc in scenarios:
        done_prompts: dict[str, tuple[str, list[dict]]] = {}
        for var in spec["variants"]:
            if args.hours and time.time() - t0 > args.hours * 3600:
                print("time budget spent; rerun the same command to resume", flush=True)
                return 0
            label = var["name"]
            opts = TranscriptOptions(**{k: v for k, v in var.items() if k not in ("name", "tool_view")})
            free = TranscriptOptions(**{**opts.__dict__, "conditioning": "free"})
            prompt = render_prompt(sc, ref, free)
            view = var.get("tool_view", "as-written")
            text, forms = apply_view(prompt.text, prompt.tools, prompt.expected_tool, view)
            call = gold_call_text(sc, free, ref.family)
            psha = hashlib.sha256((text + "\x00" + call).encode()).hexdigest()
            if (label, sc.id) in have:
                continue
            t1 = time.time()
            same_as = None
            if psha in done_prompts:
                same_as, rows_src = done_prompts[psha]
                pts_rows = [dict(r) for r in rows_src]
            else:
                from tooldecode.probe import find_value_ends

                ends = [v for v in find_value_ends(call) if v.key == spec.get("select", "newText")]
                if spec.get("items", "all") == "first-last" and len(ends) > 2:
                    ends = [ends[0], ends[-1]]
                elif spec.get("items", "all") == "last":
                    ends = ends[-1:]
                pts = probe_call(
                    be,
                    text,
                    call,
                    points=ends,
                    config=cfg,
                    tools=forms,
                    expected_tool=prompt.expected_tool,
                )
                pts_rows = [p.to_dict() for p in pts]
                done_prompts[psha] = (label, pts_rows)
            n_items = len(sc.edits)
            with probe_path.open("a") as f:
                for k, row in enumerate(pts_rows):
                    row = dict(row)
                    row.update(
                        model=args.model,
                        variant={kk: vv for kk, vv in var.items() if kk != "name"},
                        variant_label=label,
                        scenario=sc.id,
                        wire=prompt.wire,
                        n_items=n_items,
                        item_index=_item_index(spec.get("items", "all"), k, n_items),
                        prompt_sha256=psha,
                        same_prompt_as=same_as,
                        seconds=round(time.time() - t1, 2),
                    )
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
            print(f"{sc.id} {label}: {len(pts_rows)} points in {time.time() - t1:.0f}s", flush=True)
    print("suite complete", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ToolDecodeError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
