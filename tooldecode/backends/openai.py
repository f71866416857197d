"""OpenAI-compatible server backend: sampling and the exact probe through a server's Completions endpoint.

tooldecode renders the prompt (the same text and token ids as in-process) and the server evaluates
it: llama-cpp-python's own server (``python -m llama_cpp.server``), vLLM or SGLang. The tokenizer is
the model's own, loaded vocabulary-only from the local ``.gguf`` (the weights stay on the server).

What goes over the wire, per server kind:

==================  ===================  ================  =====================  ==================
kind                prompt               ``n`` per request  strict field          widest logprobs
==================  ===================  ================  =====================  ==================
llama-cpp-python    text (ids refused),  ignored: one       ``grammar`` (GBNF)     unlimited (whole
                    checked against its  request per                               vocabulary)
                    ``/extras/tokenize``  sample
vllm                token ids            honoured           ``structured_outputs``  ``--max-logprobs``
                                                            ``{"grammar": …}``      (-1: vocabulary)
sglang              token ids            honoured           ``ebnf``                server limit
==================  ===================  ================  =====================  ==================

Every request states every sampling parameter (llama-cpp-python's defaults are temperature 0.8,
top-k 40, top-p 0.95, min-p 0.05 and repeat penalty 1.1, not the plain distribution), and every
response is checked: the number of prompt tokens the server evaluated must equal what tooldecode
rendered, else ``ChannelError``.

Records have the in-process sampler's shape (``tooldecode.sampling.Sample``); what a server cannot
supply is ``None`` and its reason is in ``absent``: entropies and the mask's removed mass always,
token ids where the server reports tokens only as text and a text is shared by several tokens,
``top`` entries whose text is ambiguous, log-probabilities of strict samples where the server reports
the masked distribution's (vLLM, SGLang). ``tokens`` adds the server's own token texts.

The probe (``tooldecode.probe.probe_call``) runs unchanged on this backend (``openai_probe``). The
provider-style tool-calling arms (chat completions with ``tools=[…]``, per-tool ``strict``) are in
``openai_tools``; the HTTP client and the server kinds in ``openai_http``; the vocabulary-only
tokenizer in ``openai_vocab``; the record in ``openai_records``. Their public names are re-exported
here.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from tooldecode.backends.base import Backend
from tooldecode.backends.openai_http import (
    CAPS,
    KINDS,
    Caps,
    ChannelError,
    HttpClient,
    ServerError,
    ServerHTTPError,
    check_completion,
    check_models,
    check_tokens,
)
from tooldecode.backends.openai_probe import ServerProbe
from tooldecode.backends.openai_records import (
    AMBIGUOUS_TEXT,
    MASKED_LOGPROBS,
    NOT_REQUESTED,
    ServerSample,
    draw_concurrently,
    request_seed,
)
from tooldecode.backends.openai_vocab import GGUFVocab
from tooldecode.errors import ModelError, ToolDecodeError
from tooldecode.guard import check_api_key
from tooldecode.models import ModelRef

__all__ = [
    "CAPS",
    "KINDS",
    "Caps",
    "ChannelError",
    "OpenAIBackend",
    "ServerError",
    "ServerHTTPError",
    "ServerSample",
    "draw",
    "request_seed",
]

_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


# ---------------------------------------------------------------------------------------------
# the backend


class OpenAIBackend(ServerProbe, Backend):
    """A model served behind an OpenAI-compatible HTTP API.

    Parameters
    ----------
    model : ModelRef
        The model as tooldecode knows it (its ``.gguf`` provides the tokenizer and the chat template).
    base_url : str
        The API root, e.g. ``http://127.0.0.1:8000/v1``.
    api_key_env : str, optional
        Name of the environment variable that holds the API key (sent as a Bearer token).
    kind : str
        ``auto`` (detected from the server), ``llama-cpp-python``, ``vllm`` or ``sglang``.
    concurrency : int, optional
        Requests in flight at once (default: 1 for llama-cpp-python, which serves one at a time; 16 else).
    n_per_request : int
        Samples per request where the server honours ``n`` (each request then has one seed).
    timeout : float
        Seconds to wait for one response.
    probe_logprobs : int, optional
        ``logprobs`` for the probe's one-token requests (default: the vocabulary size, lowered to the
        server's limit when it refuses).
    """

    name = "openai"
    can_restart = False

    def __init__(
        self,
        model: ModelRef,
        *,
        base_url: str,
        api_key_env: str | None = None,
        kind: str = "auto",
        concurrency: int | None = None,
        n_per_request: int = 8,
        timeout: float = 600.0,
        probe_logprobs: int | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ServerError(f"unknown server kind {kind!r}; choose one of: {', '.join(KINDS)}")
        api_key = None
        if api_key_env:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise ServerError(f"--api-key-env {api_key_env}: that environment variable is not set")
            try:
                check_api_key(api_key, f"--api-key-env {api_key_env}")
            except ToolDecodeError as err:
                raise ServerError(str(err)) from None
        self.model = model
        self.http = HttpClient(base_url, api_key, timeout)
        self._vocab = GGUFVocab(model)
        self.n_vocab = self._vocab.n_vocab
        self.eog_ids = self._vocab.eog_ids
        self.UNSEEN = self.n_vocab  # the extra column of forward/branch_logits
        data = check_models(self.http.request("GET", "/models"), self.http.url("/models"))
        self.server_model = data[0]["id"]
        self.kind = self._detect(data[0]) if kind == "auto" else kind
        self.kind_given = kind != "auto"
        self.caps = CAPS[self.kind]
        self.honours_n = self.caps.honours_n
        self.concurrency = concurrency or (1 if self.kind == "llama-cpp-python" else 16)
        self.n_per_request = max(1, n_per_request)
        self.probe_logprobs = probe_logprobs or self.n_vocab
        self._checked: dict[str, bool] = {}
        self.lock = threading.Lock()
        self._ids_by_text: dict[str, list[int]] | None = None
        self._pieces: list[bytes] = []
        self.stats = {"requests": 0, "probe_requests": 0, "probe_max_unseen": 0.0, "probe_untokenizable": 0}

    # --- server kind --------------------------------------------------------------------------
    def _detect(self, entry: dict) -> str:
        owner = str(entry.get("owned_by", "")).lower()
        if owner in ("vllm", "sglang"):
            return owner
        try:
            self.http.request("POST", "/extras/tokenize", {"input": "a"}, root=True)
            return "llama-cpp-python"
        except ServerHTTPError:
            pass
        try:
            self.http.request("POST", "/tokenize", {"model": self.server_model, "prompt": "a"}, root=True)
            return "vllm"
        except ServerHTTPError:
            raise ServerError(
                f"{self.http.root}: cannot tell the server kind (no /extras/tokenize, no /tokenize); "
                f"pass --server-kind ({', '.join(KINDS[1:])})"
            ) from None

    # --- tokens -------------------------------------------------------------------------------
    def tokenize(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
        return self._vocab.tokenize(text, special, add_bos)

    def token_bytes(self, token_id: int) -> bytes:
        if int(token_id) >= self.n_vocab:  # the UNSEEN column: no bytes, so the probe keeps expanding it
            return b""
        return self._vocab.piece(token_id, True)

    @cached_property
    def vocab_bytes(self) -> list[bytes]:
        """The bytes of every logits column, the ``UNSEEN`` column included (it has none)."""
        return [self.token_bytes(i) for i in range(self.n_vocab + 1)]

    def server_tokenize(self, text: str) -> list[int]:
        """The server's own tokenization of ``text`` (special-token text parsed, as in its Completions)."""
        if self.kind == "llama-cpp-python":
            path, body = "/extras/tokenize", {"input": text}
        else:
            path, body = (
                "/tokenize",
                {"model": self.server_model, "prompt": text, "add_special_tokens": False},
            )
        return check_tokens(
            self.http.request("POST", path, body, root=True), self.http.url(path, root=True), self.n_vocab
        )

    def check_tokenization(self, text: str, ids: Sequence[int]) -> None:
        """``ChannelError`` unless the server tokenizes ``text`` to exactly ``ids`` (cached per text)."""
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if self._checked.get(key):
            return
        theirs = self.server_tokenize(text)
        if list(theirs) != list(ids):
            k = next((i for i, (a, b) in enumerate(zip(theirs, ids, strict=False)) if a != b), None)
            k = min(len(theirs), len(ids)) if k is None else k
            raise ChannelError(
                f"the server at {self.http.root} tokenizes the prompt differently: {len(theirs)} vs "
                f"{len(ids)} tokens, first difference at token {k} (near {text[max(0, k - 4) : k + 12]!r}); "
                "serve the same model file tooldecode uses"
            )
        self._checked[key] = True

    def text_of(self, ids: Sequence[int]) -> str | None:
        try:
            return b"".join(self.token_bytes(int(t)) for t in ids).decode("utf-8")
        except UnicodeDecodeError:
            return None

    def _key_map(self) -> dict[str, list[int]]:
        """Token text as llama-cpp-python reports it (special tokens empty, invalid UTF-8 dropped) → ids."""
        if self._ids_by_text is None:
            table: dict[str, list[int]] = {}
            pieces = []
            for i in range(self.n_vocab):
                raw = self._vocab.piece(i, False)
                pieces.append(raw)
                table.setdefault(raw.decode("utf-8", errors="ignore"), []).append(i)
            self._pieces = pieces
            self._ids_by_text = table
        return self._ids_by_text

    def _ids_of(self, tokens: Sequence[str], text: str) -> list[int] | None:
        """Token ids of a sample reported as token texts: each text's ids (several where the text is
        shared, e.g. ``" "`` and ``" \\xe2"`` both read ``" "``) narrowed to the one whose bytes continue
        the sample's text at that point; ``None`` unless every position comes out unique."""
        table = self._key_map()
        data = text.encode("utf-8")
        out: list[int] = []
        at = 0
        for tok in tokens:
            m = _TOKEN_ID.match(tok)
            if m:
                out.append(int(m.group(1)))
                at += len(self._pieces[out[-1]]) if out[-1] < self.n_vocab else 0
                continue
            cands = table.get(tok, [])
            if len(cands) > 1:
                rest = data[at:]
                cands = [
                    c for c in cands
                    if rest.startswith(self._pieces[c]) or (len(rest) < len(self._pieces[c]) and self._pieces[c].startswith(rest))
                ]  # fmt: skip
            if len(cands) != 1:
                return None
            out.append(cands[0])
            at += len(self._pieces[cands[0]])
        return out

    def token_id(self, key: str) -> int | None:
        m = _TOKEN_ID.match(key)
        if m:
            tid = int(m.group(1))
            if tid >= self.n_vocab:  # an id the model does not have: the answer is not of this model
                raise ServerError(
                    f"{self.http.base} answered token id {tid}, past the vocabulary of {self.model.id} "
                    f"({self.n_vocab} tokens); is the server running the model given with --model?"
                )
            return tid
        ids = self._key_map().get(key)
        return ids[0] if ids is not None and len(ids) == 1 else None

    # --- requests -----------------------------------------------------------------------------
    def _body(self, ids: Sequence[int], text: str, **kw: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.server_model,
            "prompt": list(ids) if self.caps.token_ids else text,
        }
        body.update(kw)
        if self.kind != "llama-cpp-python" and "logprobs" in kw:
            body["return_tokens_as_token_ids"] = True
        return body

    def sampling_fields(self, temperature: float, top_p: float, top_k: int, min_p: float) -> dict[str, Any]:
        """Every sampling parameter of a request, in this server's spelling (no server default left on)."""
        if self.kind == "llama-cpp-python":
            return {
                "temperature": temperature,
                "top_p": top_p,
                "top_k": top_k or 0,
                "min_p": min_p,
                "repeat_penalty": 1.0,
                "presence_penalty": 0.0,
                "frequency_penalty": 0.0,
            }
        return {
            "temperature": temperature,
            "top_p": top_p,
            "top_k": top_k or -1,
            "min_p": min_p,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
        }

    def _strict(self, grammar: str) -> dict[str, Any]:
        if self.caps.strict_field == "structured_outputs":
            return {"structured_outputs": {"grammar": grammar}}
        return {self.caps.strict_field: grammar}

    def count_request(self) -> None:
        """Count one request in ``stats`` (thread-safe)."""
        with self.lock:
            self.stats["requests"] += 1

    def complete(self, ids: Sequence[int], text: str, *, check_length: bool = True, **kw: Any) -> dict:
        """One Completions request for the prompt ``ids`` (= ``text``); checks the prompt length it evaluated."""
        try:
            out = self.http.request("POST", "/completions", self._body(ids, text, **kw))
        except ServerHTTPError as err:
            if self.kind_given and (err.status in (400, 422) or "validation error" in err.detail):
                # the request carries the fields of the kind named, and the server refuses them
                raise ServerError(
                    f"POST {self.http.url('/completions')}: HTTP {err.status}: the server refuses the request "
                    f"fields of a {self.kind} server ({err.detail[:120]}); is it one? pass the right "
                    "--server-kind, or auto to detect it"
                ) from None
            raise
        self.count_request()
        check_completion(out, self.http.url("/completions"))
        used = (out.get("usage") or {}).get("prompt_tokens")
        if check_length and used is not None and int(used) != len(ids):
            raise ChannelError(
                f"the server evaluated {used} prompt tokens where tooldecode rendered {len(ids)} "
                "(it adds or merges tokens, e.g. a BOS); its samples would not be comparable"
            )
        return out

    # --- sampling -----------------------------------------------------------------------------
    def sample(
        self,
        prompt: str,
        n: int,
        params: Any,
        *,
        grammar: str | None = None,
        prefill: str = "",
        start_index: int = 0,
        on_batch: Callable[[list[ServerSample]], None] | None = None,
        logprobs: bool = True,
    ) -> list[ServerSample]:
        """Draw samples ``start_index`` … ``start_index + n - 1`` of ``prompt`` (text with the prefill at its end).

        ``params`` is a ``tooldecode.sampling.SamplingParams``. With ``grammar`` (GBNF), the server's
        own strict mode constrains every token. ``on_batch`` receives samples as they arrive, so a
        server that goes away mid-call loses none that completed; the call then raises ``ServerError``.
        """
        if grammar is not None and prefill:
            raise ServerError(
                "strict sampling through a server starts the grammar at the first generated token, and "
                f"this prompt forces a prefill ({prefill[:40]!r}…) the server's grammar cannot be advanced "
                "over; run strict arms with conditioning=free on --backend openai"
            )
        ids = self.tokenize(prompt)
        if not self.caps.token_ids:
            self.check_tokenization(prompt, ids)
        indices = list(range(start_index, start_index + n))
        per = self.n_per_request if self.honours_n else 1
        groups = [indices[k : k + per] for k in range(0, len(indices), per)]
        t0 = time.perf_counter()
        jobs = [functools.partial(self._draw, ids, prompt, g, params, grammar, logprobs, t0) for g in groups]
        return draw_concurrently(jobs, self.concurrency, on_batch)

    def _draw(
        self,
        ids: list[int],
        text: str,
        group: list[int],
        params: Any,
        grammar: str | None,
        logprobs: bool,
        t0: float,
    ) -> list[ServerSample]:
        start = time.perf_counter()
        kw: dict[str, Any] = self.sampling_fields(
            params.temperature, params.top_p, params.top_k, params.min_p
        )
        kw.update(max_tokens=params.max_new_tokens, seed=request_seed(params, group[0]))
        if params.stop:
            kw["stop"] = list(params.stop)
        if len(group) > 1:
            kw["n"] = len(group)
        if logprobs:
            kw["logprobs"] = int(params.top_logprobs)
        if grammar is not None:
            kw.update(self._strict(grammar))
        out = self.complete(ids, text, **kw)
        end = time.perf_counter()
        masked = grammar is not None and self.caps.masked_logprobs
        choices = sorted(out["choices"], key=lambda c: c.get("index") or 0)
        if not choices and len(group) == 1:
            raise ServerError(
                f"POST {self.http.url('/completions')} answered an empty choices list for a request of one sample; "
                "is --base-url an OpenAI-compatible server of the --server-kind given?"
            )
        done = [
            self._parse(c, group[k], params, masked, start - t0, end - t0)
            for k, c in enumerate(choices[: len(group)])
        ]
        if len(choices) < len(group):
            # the server ignored n: take what came back, ask for the rest one by one (each a single
            # request, which answers a choice or is an error: no deeper than this)
            with self.lock:
                self.honours_n = False
            for i in group[len(choices) :]:
                done.extend(self._draw(ids, text, [i], params, grammar, logprobs, t0))
        return done

    def _parse(
        self, choice: dict, index: int, params: Any, masked: bool, start_s: float, end_s: float
    ) -> ServerSample:
        """A Completions choice as a record; ``masked``: its log-probabilities are the grammar-masked
        distribution's (dropped, with the reason in ``absent``)."""
        finish = choice.get("finish_reason") or "length"
        error = None
        if finish not in ("stop", "length"):
            error = f"the server finished this sample with {finish!r}"
            finish = "error"
        lp = choice.get("logprobs") or None
        tokens = token_ids = logprobs = top = None
        if lp and lp.get("tokens") is not None:
            tokens = [str(t) for t in lp["tokens"]]
            logprobs = [float(x) if x is not None else float("nan") for x in lp.get("token_logprobs") or []]
            token_ids = self._ids_of(tokens, choice.get("text") or "")
            top = []
            for alts in lp.get("top_logprobs") or []:
                if not alts or not params.top_logprobs:
                    top.append(None)
                    continue
                row = [[self.token_id(k), float(v)] for k, v in alts.items() if v is not None]
                row = [r for r in row if r[0] is not None]
                row.sort(key=lambda r: -r[1])
                top.append([[int(r[0]), round(r[1], 5)] for r in row[: params.top_logprobs]])
        absent: dict[str, str] = {}
        if tokens is None:
            absent.update({f: NOT_REQUESTED for f in ("token_ids", "logprobs", "top", "tokens")})
        elif token_ids is None:
            absent["token_ids"] = AMBIGUOUS_TEXT
        if masked and logprobs is not None:
            logprobs = top = None
            absent.update(logprobs=MASKED_LOGPROBS, top=MASKED_LOGPROBS)
        return ServerSample(
            index=index,
            seed=params.seed,
            text=choice.get("text") or "",
            token_ids=token_ids,
            logprobs=logprobs,
            top=top,
            finish_reason=finish,
            error=error,
            timing={
                "prefill_s": None,
                "start_s": round(start_s, 4),
                "end_s": round(end_s, 4),
                "slots": self.concurrency,
                "tokens": len(tokens) if tokens is not None else None,
            },
            tokens=tokens,
            absent=absent,
        )

    # --- not available over HTTP ----------------------------------------------------------------
    def begin(self, prompt_ids: Sequence[int], n_seqs: int) -> np.ndarray:
        raise ModelError(
            "the openai backend samples on the server (OpenAIBackend.sample); tooldecode's in-process "
            "sampler and its mask engines need the full logits, which a server does not return"
        )

    def step(self, tokens: Sequence[int], rows: Sequence[int]) -> np.ndarray:
        return self.begin([], 0)

    def end(self) -> None:
        pass

    def info(self) -> dict:
        return {
            "backend": self.name,
            "server_kind": self.kind,
            "server_model": self.server_model,
            "base_url": self.http.base,
            "honours_n": self.honours_n,
            "concurrency": self.concurrency,
            "probe_logprobs": self.probe_logprobs,
            "eval_mode": "on the server (its batching, its numerics); prompt "
            + ("as token ids" if self.caps.token_ids else "as text, tokenization checked per prompt"),
        }

    def close(self) -> None:
        self._vocab.close()


def draw(
    backend: OpenAIBackend,
    prompt: str,
    n: int,
    params: Any,
    *,
    mask: str | None = None,
    prefill: str = "",
    batch_size: int | None = None,
    start_index: int = 0,
    on_batch: Callable[[list[ServerSample]], None] | None = None,
) -> list[ServerSample]:
    """``tooldecode.sampling.sample``'s call shape for a server: ``mask`` is the strict GBNF (or ``None``:
    loose); ``batch_size`` is the server's business and ignored."""
    return backend.sample(
        prompt, n, params, grammar=mask, prefill=prefill, start_index=start_index, on_batch=on_batch
    )
