"""Chat templates: read them from a model (GGUF metadata or a Hugging Face folder) and render them.

The GGUF reader parses only the metadata block (no tensors, no llama.cpp); rendering follows
transformers' ``apply_chat_template`` (sandboxed Jinja, ``tojson`` without HTML escaping,
``{% generation %}`` blocks, ``raise_exception``, ``strftime_now``).
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

from tooldecode.errors import PromptError
from tooldecode.gguf_header import read_gguf_header
from tooldecode.models import ModelRef

__all__ = ["apply_template", "compile_template", "gguf_chat_info", "template_info", "tojson"]


# ---------------------------------------------------------------------------------------------- GGUF


@functools.lru_cache(maxsize=16)
def gguf_chat_info(path: str, mtime_ns: int) -> tuple[str | None, str | None, str | None]:
    """(chat template, BOS text, EOS text) from a GGUF file's metadata, without loading tensors."""
    head = read_gguf_header(path, keep=frozenset({"tokenizer.ggml.tokens"}))
    values, tokens = head.fields, head.arrays.get("tokenizer.ggml.tokens")

    def token(key: str) -> str | None:
        idx = values.get(key)
        return tokens[idx] if tokens is not None and isinstance(idx, int) and 0 <= idx < len(tokens) else None

    template = values.get("tokenizer.chat_template")
    return (
        template if isinstance(template, str) else None,
        token("tokenizer.ggml.bos_token_id"),
        token("tokenizer.ggml.eos_token_id"),
    )


def template_info(ref: ModelRef) -> tuple[str | None, str | None, str | None]:
    """(chat template, BOS text, EOS text) of a GGUF file or a Hugging Face model folder."""
    path = ref.path
    if path.is_dir():
        cfg = path / "tokenizer_config.json"
        if not cfg.exists():
            return None, None, None
        data = json.loads(cfg.read_text())
        template = data.get("chat_template")
        if isinstance(template, list):  # named templates: take "default"
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        tok = {
            k: (v.get("content") if isinstance(v, dict) else v)
            for k, v in data.items()
            if k.endswith("_token")
        }
        return template, tok.get("bos_token"), tok.get("eos_token")
    return gguf_chat_info(str(path), path.stat().st_mtime_ns)


def tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: Any = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson`` filter (no HTML escaping, unlike Jinja's own)."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


# ---------------------------------------------------------------------------------------------- jinja


@functools.lru_cache(maxsize=16)
def compile_template(template: str):
    """Compile a chat template the way transformers' ``apply_chat_template`` does."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _Generation(jinja2.ext.Extension):
        """``{% generation %}…{% endgeneration %}`` renders its body (transformers tracks indices; we don't)."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def apply_template(
    template: str,
    messages: list[dict],
    tools: list[dict] | None,
    bos: str | None,
    eos: str | None,
    add_generation_prompt: bool = False,
) -> str:
    """Render ``messages`` (and ``tools``) with a chat template, as ``apply_chat_template`` does.

    Raises
    ------
    PromptError
        When the template itself fails (one line with the template's message).
    """
    import jinja2

    try:
        return compile_template(template).render(
            messages=messages,
            tools=tools,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos or "",
            eos_token=eos or "",
        )
    except jinja2.TemplateError as err:
        raise PromptError(f"the model's chat template failed: {err}") from None
