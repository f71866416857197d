"""``tooldecode scenarios show ID --variant SPEC --model ID_OR_PATH``: the exact prompt and its token count.

The prompt text goes to stdout byte for byte (``> prompt.txt`` keeps it exact); the token count and
what the model is expected to write go to stderr. ``--json`` prints every field of the ``Prompt``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path

from tooldecode.cli.options import add_command, add_model_option, add_switch
from tooldecode.errors import ModelError
from tooldecode.models import ModelRef


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (C-level logging) for the duration of the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def count_tokens(ref: ModelRef, text: str) -> int:
    """Tokens in ``text`` for ``ref``'s tokenizer, special tokens parsed, no BOS added."""
    if not ref.path.exists():
        raise ModelError(
            f"model '{ref.id}' is not fetched; run `tooldecode models fetch {ref.id}` to count tokens"
        )
    if ref.is_gguf:
        import llama_cpp

        with _quiet_stderr():  # llama.cpp logs a context-size warning for vocab-only loads
            vocab = llama_cpp.Llama(model_path=str(ref.path), vocab_only=True, verbose=False)
        try:
            return len(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True))
        finally:
            vocab.close()
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(ref.path)(text, add_special_tokens=False)["input_ids"])


def _cmd_show(args: argparse.Namespace) -> int:
    """print the exact prompt a model sees for a scenario in a transcript variant"""
    from tooldecode.errors import ScenarioError
    from tooldecode.prompts import format_variant, model_ref, parse_variant, render_prompt
    from tooldecode.scenarios import check_scenario, get_scenario

    scenario = get_scenario(args.id, args.dirs or None)
    problems = check_scenario(scenario)
    if problems:
        raise ScenarioError(
            f"{scenario.source}: {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
            + "; fix the scenario (`tooldecode scenarios check` lists every problem)"
        )
    options = parse_variant(args.variant)
    ref = model_ref(args.model)
    prompt = render_prompt(scenario, ref, options)
    try:
        tokens: int | None = count_tokens(ref, prompt.text)
        count = f"{tokens} tokens"
    except ModelError as err:
        tokens, count = None, f"token count unavailable: {err}"
    if args.json:
        data = dataclasses.asdict(prompt)
        data["tools"] = [t.name for t in prompt.tools]
        data.update(scenario=scenario.id, model=ref.id, variant=format_variant(options), tokens=tokens)
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return 0
    sys.stdout.write(prompt.text)
    sys.stdout.flush()
    tail = "" if prompt.text.endswith("\n") else "\n"
    session = getattr(scenario, "kind", "edit") == "session"
    variant = "session (its history as imported)" if session else f"variant {format_variant(options)}"
    print(
        f"{tail}--- {count} · {ref.id} ({prompt.family}) · {variant} · "
        f"expects {prompt.expected_tool} in {prompt.wire} · prefill {len(prompt.prefill)} chars",
        file=sys.stderr,
    )
    return 0


def register_show(scenarios_subparsers: argparse._SubParsersAction) -> None:
    """Add ``show`` to the ``tooldecode scenarios`` group."""
    q = add_command(scenarios_subparsers, "show", _cmd_show)
    q.add_argument("id", help="scenario id (see `tooldecode scenarios list`)")
    q.add_argument(
        "--variant",
        default="agentic",
        help="comma-separated variant words, e.g. agentic,thinking,prior,flat-edit,closed,antml,gold-prefix "
        "(docs/prompts.md lists them)",
    )
    add_model_option(q, help="model id, .gguf file or model folder")
    q.add_argument(
        "--dir",
        dest="dirs",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="scenario folder to look in (repeatable; default: the built-in corpus)",
    )
    add_switch(q, "--json", "print every Prompt field as JSON instead")
