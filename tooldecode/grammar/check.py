"""Independent engines that read our grammar text, for tests and the conformance script.

Each function imports its engine lazily, so importing this module stays cheap. None of these is
our code: ``lark`` (Earley parser), ``llguidance`` (Lark dialect, byte-level matcher), ``xgrammar``
(GBNF/EBNF), Python ``re``, and llama.cpp's GBNF parser via llama-cpp-python when installed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

ENGINES = ("lark", "llguidance", "xgrammar", "re")
# the grammar format each engine reads, by the engine's name (the mask engines of tooldecode.masking
# among them: their formats are these)
FORMAT_OF = {"lark": "lark", "llguidance": "lark", "xgrammar": "gbnf", "re": "regex", "llama-grammar": "gbnf"}


class EngineError(Exception):
    """The engine refused the grammar text."""


def available(engine: str) -> bool:
    mod = {
        "lark": "lark",
        "llguidance": "llguidance",
        "xgrammar": "xgrammar",
        "re": "re",
        "llama-grammar": "llama_cpp",
    }[engine]
    import importlib.util

    return importlib.util.find_spec(mod) is not None


# -- lark
@lru_cache(maxsize=256)
def _lark_parser(text: str) -> Any:
    import lark

    try:
        # dynamic_complete: every length of every terminal match is considered (exact CFG semantics);
        # the default "dynamic" lexer keeps only Python's first regex match, which may be too short
        return lark.Lark(text, start="start", parser="earley", lexer="dynamic_complete")
    except Exception as e:  # lark.exceptions.GrammarError and friends
        raise EngineError(f"lark: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e


def lark_accepts(grammar: str, s: str) -> bool:
    import lark

    p = _lark_parser(grammar)
    try:
        p.parse(s)
        return True
    except lark.exceptions.LarkError:
        return False


# -- llguidance
class _ByteTok:
    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids = [256]

    def __call__(self, s: str | bytes) -> list[int]:
        if isinstance(s, str):
            s = s.encode("utf-8")
        return list(s)


@lru_cache(maxsize=1)
def _llg_tokenizer() -> Any:
    import llguidance

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteTok()), slices=[])


@lru_cache(maxsize=256)
def _llg_grammar(text: str) -> str:
    import llguidance

    g = llguidance.grammar_from("lark", text)
    err = llguidance.LLMatcher.validate_grammar(g, _llg_tokenizer())
    if err:
        raise EngineError(f"llguidance: {err.splitlines()[0]}")
    return g


def llguidance_validate(grammar: str) -> None:
    _llg_grammar(grammar)


def llguidance_accepts(grammar: str, s: str) -> bool:
    import llguidance

    g = _llg_grammar(grammar)
    m = llguidance.LLMatcher(_llg_tokenizer(), g, log_level=0)
    if m.is_error():
        raise EngineError(f"llguidance: {m.get_error().splitlines()[0]}")
    ok = m.consume_tokens(list(s.encode("utf-8")))
    return bool(ok) and m.is_accepting()


# -- xgrammar
@lru_cache(maxsize=256)
def _xgr_grammar(text: str) -> Any:
    import xgrammar

    try:
        return xgrammar.Grammar.from_ebnf(text, root_rule_name="root")
    except Exception as e:
        raise EngineError(f"xgrammar: {str(e).strip().splitlines()[-1]}") from e


def xgrammar_accepts(grammar: str, s: str) -> bool:
    from xgrammar.testing import _is_grammar_accept_string

    return bool(_is_grammar_accept_string(_xgr_grammar(grammar), s))


def xgrammar_validate(grammar: str) -> None:
    _xgr_grammar(grammar)


# -- Python re
@lru_cache(maxsize=256)
def _re(text: str) -> Any:
    import re

    try:
        return re.compile(text)
    except re.error as e:
        raise EngineError(f"re: {e}") from e


def re_accepts(grammar: str, s: str) -> bool:
    return _re(grammar).fullmatch(s) is not None


# -- llama.cpp (parse only)
def llamacpp_validate(grammar: str) -> None:
    from llama_cpp import LlamaGrammar

    try:
        LlamaGrammar.from_string(grammar, verbose=False)
    except Exception as e:
        raise EngineError(f"llama.cpp: {e}") from e


ACCEPTS: dict[str, Callable[[str, str], bool]] = {
    "lark": lark_accepts,
    "llguidance": llguidance_accepts,
    "xgrammar": xgrammar_accepts,
    "re": re_accepts,
}


def accepts(engine: str, grammar: str, s: str) -> bool:
    return ACCEPTS[engine](grammar, s)


def validate(engine: str, grammar: str) -> None:
    """Raise EngineError unless the engine reads the grammar text."""
    if engine == "lark":
        _lark_parser(grammar)
    elif engine == "llguidance":
        llguidance_validate(grammar)
    elif engine == "xgrammar":
        xgrammar_validate(grammar)
    elif engine == "re":
        _re(grammar)
    elif engine == "llama-grammar":
        llamacpp_validate(grammar)
    else:
        raise ValueError(engine)


# -- random derivations (to test soundness: every derived text must validate)
def random_text(g: Any, rng: Any, max_depth: int = 12) -> str:
    """A random text derived from a grammar IR (``tooldecode.grammar.gir.Grammar``).

    Characters are drawn with a bias towards characters that tend to break encoders (quotes,
    backslashes, ``<``, controls, non-ASCII, astral); repetitions are short. Raises RecursionError
    when a recursive grammar does not terminate within ``max_depth`` references (retry).
    """
    from tooldecode.grammar import automata as A
    from tooldecode.grammar.gir import GAlt, GLit, GRef, GRep, GSeq, GTok

    interesting = [ord(c) for c in '"\\/<>|a Z0-9\n\t\x00\x1f\x7féλ€\u2028😀'] + [0xFFFF, 0x10FFFF]

    def pick_char(cs: A.Charset) -> str:
        cands = [c for c in interesting if A.cs_has(cs, c)]
        if cands and rng.random() < 0.6:
            return chr(rng.choice(cands))
        ascii_part = A.cs_inter(cs, ((0x20, 0x7E),))
        pool = ascii_part if ascii_part and rng.random() < 0.7 else cs
        total = A.cs_size(pool)
        k = rng.randrange(total)
        for lo, hi in pool:
            if k <= hi - lo:
                return chr(lo + k)
            k -= hi - lo + 1
        raise AssertionError("unreachable")

    def count(lo: int, hi: int | None) -> int:
        top = lo + 3 if hi is None else min(hi, lo + 3)
        return rng.randint(lo, top)

    def rx(n: A.RNode) -> str:
        if isinstance(n, A.Chars):
            if not n.cs:
                raise ValueError("empty class")
            return pick_char(n.cs)
        if isinstance(n, A.Cat):
            return "".join(rx(i) for i in n.items)
        if isinstance(n, A.Or):
            return rx(rng.choice(n.items))
        if isinstance(n, A.Rep):
            return "".join(rx(n.item) for _ in range(count(n.lo, n.hi)))
        if isinstance(n, A.Sym):
            return rx(n.node)
        raise TypeError(n)

    def go(e: Any, depth: int) -> str:
        if isinstance(e, GLit):
            return e.text
        if isinstance(e, GTok):
            return rx(e.ast)
        if isinstance(e, GSeq):
            return "".join(go(i, depth) for i in e.items)
        if isinstance(e, GAlt):
            if not e.items:
                raise ValueError("empty alternative")
            return go(rng.choice(e.items), depth)
        if isinstance(e, GRep):
            return "".join(go(e.item, depth) for _ in range(count(e.lo, e.hi)))
        if isinstance(e, GRef):
            if depth >= max_depth:
                raise RecursionError("derivation too deep")
            return go(g.rules[e.name], depth + 1)
        raise TypeError(e)

    return go(g.rules[g.root], 0)
