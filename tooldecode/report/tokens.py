"""A call, token by token: one strict sample beside its loose twin, each token shaded by its probability,
its top alternatives and the mass the mask removed on hover (``title`` attributes), in plain HTML.

The samples store token ids, not their text; the text of each token comes from the model's GGUF
vocabulary when the model is present on this machine (read from the file's metadata, no weights loaded),
and is shown as ``#id`` otherwise.
"""

from __future__ import annotations

import html
import json
import math
import mmap
import struct
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from tooldecode.backends.base import byte_level_decoder

Vocab = Callable[[int], str]
_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

CSS = """
.tokstrip{font:12px/1.9 ui-monospace,monospace;white-space:pre-wrap;word-break:break-all;max-width:660px}
.tokstrip span{border-radius:2px;padding:0 1px}
.tokstrip span.cut{box-shadow:inset 0 -3px #1f5fbf}
table.tokpair td{vertical-align:top}
.tokpair .prefix{color:#777;font:12px/1.6 ui-monospace,monospace;white-space:pre-wrap;max-width:660px}
.tokpair .finish{color:#555;font-size:12px}
"""


def gguf_tokens(path: str | Path) -> list[str] | None:
    """The ``tokenizer.ggml.tokens`` of a GGUF file (metadata only), or None when it cannot be read."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if mm[:4] != b"GGUF":
                return None
            (n_kv,) = struct.unpack_from("<Q", mm, 16)
            off = 24

            def skip_string(at: int) -> int:
                return at + 8 + struct.unpack_from("<Q", mm, at)[0]

            for _ in range(n_kv):
                (klen,) = struct.unpack_from("<Q", mm, off)
                key = mm[off + 8 : off + 8 + klen].decode("utf-8", "replace")
                off += 8 + klen
                (vtype,) = struct.unpack_from("<I", mm, off)
                off += 4
                if vtype == 8:
                    off = skip_string(off)
                elif vtype == 9:
                    etype, count = struct.unpack_from("<IQ", mm, off)
                    off += 12
                    if etype == 8:
                        items = [] if key == "tokenizer.ggml.tokens" else None
                        for _ in range(count):
                            (n,) = struct.unpack_from("<Q", mm, off)
                            if items is not None:
                                items.append(mm[off + 8 : off + 8 + n].decode("utf-8", "replace"))
                            off += 8 + n
                        if items is not None:
                            return items
                    elif etype in _SCALAR_SIZE:
                        off += count * _SCALAR_SIZE[etype]
                    else:
                        return None
                elif vtype in _SCALAR_SIZE:
                    off += _SCALAR_SIZE[vtype]
                else:
                    return None
    except (OSError, struct.error, ValueError, OverflowError):
        return None
    return None


def decode_piece(tok: str) -> str:
    """The text of one vocabulary entry: byte-level BPE decoded, SentencePiece's ``▁`` as a space."""
    dec = byte_level_decoder()
    if tok and all(ch in dec for ch in tok):
        return bytes(dec[ch] for ch in tok).decode("utf-8", "replace")
    return tok.replace("▁", " ")


@lru_cache(maxsize=4)
def vocab_for(model: str) -> Vocab | None:
    """Token id → text for a model present on this machine (its GGUF), else None. Never fetches."""
    from tooldecode.errors import ModelError
    from tooldecode.models import resolve

    try:
        ref = resolve(model)
    except (ModelError, OSError, ValueError):
        return None
    if not str(ref.path).endswith(".gguf"):
        return None
    toks = gguf_tokens(ref.path)
    if toks is None:
        return None

    def piece(i: int) -> str:
        return decode_piece(toks[i]) if 0 <= i < len(toks) else f"#{i}"

    return piece


def _records(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except (ValueError, RecursionError):  # ValueError: also an over-long integer
                    continue
                # the run store's readers skip and count a bad record; here it is only left out
                if (
                    isinstance(rec, dict)
                    and isinstance(rec.get("arm"), dict)
                    and isinstance(rec["arm"].get("mode"), str)
                    and isinstance(rec.get("text"), str)
                    and isinstance(rec.get("scenario"), str)
                ):
                    yield rec
    except OSError:
        return


def _twin_key(r: dict[str, Any]) -> tuple:
    arm = {k: v for k, v in r.get("arm", {}).items() if k not in ("mode", "engine", "grammar")}
    return (json.dumps(arm, sort_keys=True), r.get("scenario"), r.get("seed"), r.get("index"))


def pick_pair(samples: Path, limit: int = 20000) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A strict sample and its loose twin (same arm but for the mode, scenario, seed, index) from a
    ``samples.jsonl``, preferring a pair whose texts differ; None without one."""
    pairs = pick_pairs(samples, 1, limit)
    return pairs[0] if pairs else None


def pick_pairs(samples: Path, k: int = 12, limit: int = 20000) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Up to ``k`` pairs of a strict sample and its loose twin, those whose texts differ first (in file
    order), for the report's chooser over draws."""
    strict: dict[tuple, dict[str, Any]] = {}
    loose: dict[tuple, dict[str, Any]] = {}
    differ: list[tuple[dict[str, Any], dict[str, Any]]] = []
    same: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for n, r in enumerate(_records(samples)):
        if n >= limit:
            break
        if (
            r.get("error")
            or not r.get("token_ids")
            or r.get("arm", {}).get("mode") not in ("strict", "loose")
        ):
            continue
        key = _twin_key(r)
        (strict if r["arm"]["mode"] == "strict" else loose)[key] = r
        if key in strict and key in loose:
            pair = (strict.pop(key), loose.pop(key))
            (differ if pair[0].get("text") != pair[1].get("text") else same).append(pair)
            if len(differ) >= k:
                break
    return (differ + same)[:k]


PREFIX_TAIL = 160  # characters of the forced prefill shown before a strip


def _prefix_html(record: dict[str, Any]) -> str:
    """The text the call continues: the tail of the forced prefill, or a note that the draw was free."""
    prefill = record.get("prefill") or ""
    if not prefill:
        return '<div class="prefix">(free: the call starts right after the prompt)</div>'
    tail = prefill[-PREFIX_TAIL:]
    more = "…" if len(prefill) > PREFIX_TAIL else ""
    return f'<div class="prefix" title="the forced prefill">{more}{html.escape(tail)}</div>'


def _pair_html(strict: dict[str, Any], loose: dict[str, Any], vocab: Vocab | None, open_: bool) -> str:
    def finish(r: dict[str, Any]) -> str:
        return f'<div class="finish">finish: {html.escape(str(r.get("finish_reason") or "?"))}, {len(r.get("token_ids") or [])} tokens</div>'

    label = (
        f"scenario {strict.get('scenario')}, seed {strict.get('seed')}, index {strict.get('index')}: "
        f"strict {strict.get('finish_reason') or '?'}, loose {loose.get('finish_reason') or '?'}"
        + ("" if strict.get("text") != loose.get("text") else " (same text)")
    )
    return (
        f"<details{' open' if open_ else ''}><summary>{html.escape(label)}</summary>"
        '<table class="tokpair"><tr><th>strict</th><th>loose</th></tr><tr>'
        f"<td>{_prefix_html(strict)}{strip_html(strict, vocab)}{finish(strict)}</td>"
        f"<td>{_prefix_html(loose)}{strip_html(loose, vocab)}{finish(loose)}</td></tr></table></details>"
    )


def strip_html(record: dict[str, Any], vocab: Vocab | None) -> str:
    """One sample's tokens: shaded by probability (white = 1, red = 0), hover for the probability, the
    top alternatives and the mass the mask removed; an underline where the mask removed over 1%."""

    def text(i: int) -> str:
        return vocab(i) if vocab is not None else f"#{i}"

    ids = record.get("token_ids") or []
    lps = record.get("logprobs") or []
    tops = record.get("top") or []
    removed = record.get("mask_removed") or []
    out = []
    for i, tid in enumerate(ids):
        p = math.exp(lps[i]) if i < len(lps) and lps[i] is not None else float("nan")
        info = [f"p={p:.4f}"]
        top = tops[i] if i < len(tops) else None
        if top:
            alts = ", ".join(f"{text(int(t))!r} {math.exp(lp):.3f}" for t, lp in top[:5])
            info.append(f"top: {alts}")
        cut = removed[i] if i < len(removed) else None
        if cut is not None:
            info.append(f"mask removed {cut:.4f}")
        shade = 0.0 if math.isnan(p) else 1.0 - p
        cls = ' class="cut"' if cut is not None and cut > 0.01 else ""
        out.append(
            f'<span{cls} style="background:rgba(220,50,32,{0.75 * shade:.3f})" '
            f'title="{html.escape(" | ".join(info))}">{html.escape(text(tid))}</span>'
        )
    return f'<div class="tokstrip">{"".join(out)}</div>'


def token_section(run_paths: Sequence[Path], vocab_of: Callable[[str], Vocab | None] = vocab_for) -> str:
    """The report section: the first run with a strict sample and its loose twin, strict beside loose
    (empty when no run has such a pair)."""
    for path in run_paths:
        pairs = pick_pairs(Path(path) / "samples.jsonl")
        if not pairs:
            continue
        strict, _ = pairs[0]
        vocab = vocab_of(str(strict["arm"].get("model", "")))
        note = (
            f"Run <code>{html.escape(Path(path).name)}</code>: {len(pairs)} draw(s) of a strict sample and its "
            "loose twin (same arm but the mode, scenario, seed and index), those whose texts differ first; "
            "open one to see it. Above each strip the text the call continues (the forced prefill's tail), "
            "below it the finish reason. Each token is shaded by its "
            "probability under the model (deeper red = less probable); hover a token for its probability, "
            "its top alternatives and, in the strict sample, the probability mass the grammar mask removed "
            "(underlined where over 1%)."
            + ("" if vocab is not None else " The model is not on this machine, so tokens show as ids.")
        )
        body = "".join(_pair_html(s, lo, vocab, i == 0) for i, (s, lo) in enumerate(pairs))
        return f'<h2>A call, token by token</h2><p class="note">{note}</p>{body}'
    return ""
