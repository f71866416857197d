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
supply is ``None``: entropies and the mask's removed mass always, token ids where the server
reports tokens only as text and a text is shared by several tokens, ``top`` entries whose text is
ambiguous. ``tokens`` adds the server's own token texts.

The probe (``tooldecode.probe.probe_call``) runs unchanged on this backend: ``forward`` and
``branch_logits`` ask for one token (``max_tokens=1``) with the widest ``logprobs`` the server
allows and return log-probabilities over the vocabulary plus one extra column, ``UNSEEN``, holding
the mass the server did not show (tokens past its limit, tokens whose text collides with another's).
The probe keeps that column in its "more" class until its depth runs out, so it ends up in
``p_undetermined``, never in close/continue/other.
"""

from __future__ import annotations

import ctypes
import hashlib
import http.client
import json
import math
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tooldecode.backends.base import Backend
from tooldecode.errors import ModelError
from tooldecode.models import ModelRef

KINDS = ("auto", "llama-cpp-python", "vllm", "sglang")


class ServerError(ModelError):
    """The server could not be reached, went away, or answered with an error."""


class ServerHTTPError(ServerError):
    """The server answered with an HTTP error status."""

    def __init__(self, message: str, status: int, detail: str) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class ChannelError(ServerError):
    """The server would not evaluate the tokens tooldecode rendered (tokenization differs)."""


@dataclass(frozen=True)
class Caps:
    """What a server kind accepts."""

    token_ids: bool  # the Completions prompt may be a list of token ids
    honours_n: bool  # ``n`` > 1 returns n choices
    strict_field: str  # where a GBNF grammar goes
    tokenize_path: str  # the tokenize endpoint (relative to the server root)


CAPS = {
    "llama-cpp-python": Caps(False, False, "grammar", "/extras/tokenize"),
    "vllm": Caps(True, True, "structured_outputs", "/tokenize"),
    "sglang": Caps(True, True, "ebnf", "/tokenize"),
}


# ---------------------------------------------------------------------------------------------
# HTTP


def _detail(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:300]
    err = body.get("error", body.get("detail", body)) if isinstance(body, dict) else body
    if isinstance(err, dict):
        err = err.get("message", err)
    return " ".join(str(err).split())[:300]


class _Http:
    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        base = base_url.rstrip("/")
        parts = urllib.parse.urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ServerError(f"--base-url {base_url!r} is not an http(s) URL; e.g. http://127.0.0.1:8000/v1")
        self.base = base
        root_path = parts.path[: -len("/v1")] if parts.path.endswith("/v1") else parts.path
        self.root = urllib.parse.urlunsplit((parts.scheme, parts.netloc, root_path, "", ""))
        self.api_key = api_key
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None, *, root: bool = False) -> Any:
        url = (self.root if root else self.base) + path
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            detail = _detail(err.read())
            raise ServerHTTPError(f"{method} {url}: HTTP {err.code}: {detail}", err.code, detail) from None
        except (urllib.error.URLError, ConnectionError, http.client.HTTPException, OSError) as err:
            reason = getattr(err, "reason", None) or err
            raise ServerError(
                f"cannot reach the server at {url} ({type(reason).__name__}: {reason}); "
                "start it or fix --base-url (completed samples are kept; rerun to resume)"
            ) from None
        try:
            return json.loads(raw)
        except ValueError:
            raise ServerError(f"{method} {url}: the server answered with non-JSON ({raw[:80]!r})") from None


# ---------------------------------------------------------------------------------------------
# the model's tokenizer, vocabulary only


class _GGUFVocab:
    """Token ids and bytes from a ``.gguf`` file loaded vocabulary-only (no weights)."""

    def __init__(self, ref: ModelRef) -> None:
        if not ref.is_gguf:
            raise ModelError(
                f"--backend openai reads the tokenizer from a .gguf file; '{ref.path}' is a folder "
                "(pass the model's .gguf id or path with --model)"
            )
        try:
            import llama_cpp
            from llama_cpp import _logger
            from llama_cpp._internals import LlamaModel
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ModelError(f"llama-cpp-python is not installed ({err}); run `make setup`") from None
        _logger.set_verbose(bool(os.environ.get("TOOLDECODE_LLAMA_VERBOSE")))
        self._lc = llama_cpp
        llama_cpp.llama_backend_init()
        mparams = llama_cpp.llama_model_default_params()
        mparams.vocab_only = True
        try:
            self._model = LlamaModel(path_model=str(ref.path), params=mparams, verbose=False)
        except ValueError:
            raise ModelError(f"llama.cpp could not read the vocabulary of '{ref.path}'") from None
        self.vocab = self._model.vocab
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.eog_ids = frozenset(
            i for i in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab, i)
        )
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    def tokenize(self, text: str, special: bool, add_bos: bool) -> list[int]:
        data = text.encode("utf-8")
        lc = self._lc
        cap = len(data) + 16
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, add_bos and self.add_bos, special)
        if n < 0:
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, add_bos and self.add_bos, special)
        return list(buf[:n])

    def piece(self, token_id: int, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(256)
        n = self._lc.llama_token_to_piece(self.vocab, int(token_id), buf, 256, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._lc.llama_token_to_piece(self.vocab, int(token_id), buf, -n, 0, special)
        return buf.raw[:n]

    def close(self) -> None:
        model = getattr(self, "_model", None)
        if model is not None:
            model.close()
            self._model = None


# ---------------------------------------------------------------------------------------------
# records


@dataclass
class ServerSample:
    """One sample drawn by the server; the fields of ``tooldecode.sampling.Sample`` (``None`` where the
    server cannot supply them) plus ``tokens``, the server's own token texts."""

    index: int
    seed: int
    text: str
    token_ids: list[int] | None
    logprobs: list[float] | None
    top: list[list[list[float]] | None] | None
    entropy: list[float] | None
    entropy_masked: list[float] | None
    mask_removed: list[float] | None
    finish_reason: str
    error: str | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    tokens: list[str] | None = None
    tool_name: str | None = None  # chat tool calling: the called tool (``text`` holds its arguments)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def request_seed(seed: int, index: int) -> int:
    """The server-side seed of sample ``index`` of seed ``seed`` (31 bits; stable across runs)."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0]) & 0x7FFFFFFF


_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


# ---------------------------------------------------------------------------------------------
# the backend


class OpenAIBackend(Backend):
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
        self.model = model
        self.http = _Http(base_url, api_key, timeout)
        self._vocab = _GGUFVocab(model)
        self.n_vocab = self._vocab.n_vocab
        self.eog_ids = self._vocab.eog_ids
        self.UNSEEN = self.n_vocab  # the extra column of forward/branch_logits
        listed = self.http.request("GET", "/models")
        data = listed.get("data") if isinstance(listed, dict) else None
        if not data:
            raise ServerError(f"{self.http.base}/models lists no model; is this an OpenAI-compatible server?")
        self.server_model = str(data[0].get("id"))
        self.kind = self._detect(data[0]) if kind == "auto" else kind
        self.caps = CAPS[self.kind]
        self.honours_n = self.caps.honours_n
        self.concurrency = concurrency or (1 if self.kind == "llama-cpp-python" else 16)
        self.n_per_request = max(1, n_per_request)
        self.probe_logprobs = probe_logprobs or self.n_vocab
        self._checked: dict[str, bool] = {}
        self._lock = threading.Lock()
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

    def server_tokenize(self, text: str) -> list[int]:
        """The server's own tokenization of ``text`` (special-token text parsed, as in its Completions)."""
        if self.kind == "llama-cpp-python":
            out = self.http.request("POST", "/extras/tokenize", {"input": text}, root=True)
        else:
            out = self.http.request(
                "POST",
                "/tokenize",
                {"model": self.server_model, "prompt": text, "add_special_tokens": False},
                root=True,
            )
        return [int(t) for t in out["tokens"]]

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

    def _text_of(self, ids: Sequence[int]) -> str | None:
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

    def _token_id(self, key: str) -> int | None:
        m = _TOKEN_ID.match(key)
        if m:
            return int(m.group(1))
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

    def _sampling(self, temperature: float, top_p: float, top_k: int, min_p: float) -> dict[str, Any]:
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

    def complete(self, ids: Sequence[int], text: str, *, check_length: bool = True, **kw: Any) -> dict:
        """One Completions request for the prompt ``ids`` (= ``text``); checks the prompt length it evaluated."""
        out = self.http.request("POST", "/completions", self._body(ids, text, **kw))
        with self._lock:
            self.stats["requests"] += 1
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
        out: list[ServerSample] = []
        error: BaseException | None = None
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(groups) or 1)))
        try:
            futures = [pool.submit(self._draw, ids, prompt, g, params, grammar, logprobs, t0) for g in groups]
            for fut in as_completed(futures):
                try:
                    got = fut.result()
                except BaseException as err:  # keep what completed; stop the rest
                    if error is None:
                        error = err
                        for f in futures:
                            f.cancel()
                    continue
                out.extend(got)
                if on_batch is not None and got:
                    on_batch(got)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        if error is not None:
            raise error
        return sorted(out, key=lambda s: s.index)

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
        kw: dict[str, Any] = self._sampling(params.temperature, params.top_p, params.top_k, params.min_p)
        kw.update(max_tokens=params.max_new_tokens, seed=request_seed(params.seed, group[0]))
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
        choices = sorted(out.get("choices") or [], key=lambda c: int(c.get("index", 0)))
        if len(choices) < len(group):
            # the server ignored n: take what came back, ask for the rest one by one
            with self._lock:
                self.honours_n = False
            done = [self._parse(c, group[k], params, start - t0, end - t0) for k, c in enumerate(choices)]
            for i in group[len(choices) :]:
                done.extend(self._draw(ids, text, [i], params, grammar, logprobs, t0))
            return done
        return [
            self._parse(c, group[k], params, start - t0, end - t0)
            for k, c in enumerate(choices[: len(group)])
        ]

    def _parse(self, choice: dict, index: int, params: Any, start_s: float, end_s: float) -> ServerSample:
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
                row = [[self._token_id(k), float(v)] for k, v in alts.items()]
                row = [r for r in row if r[0] is not None]
                row.sort(key=lambda r: -r[1])
                top.append([[int(r[0]), round(r[1], 5)] for r in row[: params.top_logprobs]])
        return ServerSample(
            index=index,
            seed=params.seed,
            text=choice.get("text") or "",
            token_ids=token_ids,
            logprobs=logprobs,
            top=top,
            entropy=None,
            entropy_masked=None,
            mask_removed=None,
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
        )

    # --- provider-style tool calling (chat completions) ----------------------------------------
    def chat_tool_samples(
        self,
        messages: Sequence[dict],
        tools: Sequence[dict],
        n: int,
        params: Any,
        *,
        strict: bool,
        tool_choice: str | dict = "required",
        start_index: int = 0,
    ) -> list[ServerSample]:
        """Samples of the channel a production agent uses: chat completions with ``tools=[…]`` (each
        ``{"type": "function", "function": {name, description, parameters}}``) and per-tool ``strict``.

        The server renders the prompt with its own chat template. ``text`` of a sample is the first
        tool call's ``arguments`` (``tool_name`` names the tool) or, without a tool call, the message
        content. One request per sample (seed per index, as ``sample``).
        """
        fns = [dict(t, function=dict(t["function"], strict=bool(strict))) for t in tools]
        out: list[ServerSample] = []
        for i in range(start_index, start_index + n):
            body: dict[str, Any] = {
                "model": self.server_model,
                "messages": list(messages),
                "tools": fns,
                "tool_choice": tool_choice,
                "max_tokens": params.max_new_tokens,
                "seed": request_seed(params.seed, i),
                **self._sampling(params.temperature, params.top_p, params.top_k, params.min_p),
            }
            t = time.perf_counter()
            got = self.http.request("POST", "/chat/completions", body)
            with self._lock:
                self.stats["requests"] += 1
            choice = (got.get("choices") or [{}])[0]
            msg = choice.get("message") or {}
            calls = msg.get("tool_calls") or []
            fn = (calls[0].get("function") or {}) if calls else {}
            finish = choice.get("finish_reason") or "length"
            finish = "stop" if finish in ("tool_calls", "function_call") else finish
            out.append(
                ServerSample(
                    index=i,
                    seed=params.seed,
                    text=str(fn.get("arguments") if calls else msg.get("content") or ""),
                    token_ids=None,
                    logprobs=None,
                    top=None,
                    entropy=None,
                    entropy_masked=None,
                    mask_removed=None,
                    finish_reason=finish if finish in ("stop", "length") else "error",
                    error=None if finish in ("stop", "length") else f"the server finished with {finish!r}",
                    timing={"request_s": round(time.perf_counter() - t, 4)},
                    tool_name=fn.get("name") if calls else None,
                )
            )
        return out

    # --- next-token distributions (the probe) -------------------------------------------------
    def next_logprobs(self, ids: Sequence[int]) -> np.ndarray:
        """Log-probabilities of the next token after ``ids``: ``n_vocab + 1`` entries, the last (``UNSEEN``)
        holding the mass the server did not attribute to a token (``-inf`` where everything was seen)."""
        row = np.full(self.n_vocab + 1, -np.inf, dtype=np.float64)
        text = self._text_of(ids)
        if not self.caps.token_ids:
            ok = text is not None
            if ok:
                try:
                    self.check_tokenization(text, ids)  # type: ignore[arg-type]
                except ChannelError:
                    ok = False
            if not ok:  # cannot be sent as text without re-tokenizing: all of it undetermined
                with self._lock:
                    self.stats["probe_untokenizable"] += 1
                row[self.UNSEEN] = 0.0
                return row
        kw = self._sampling(1.0, 1.0, 0, 0.0)
        while True:
            try:
                out = self.complete(ids, text or "", max_tokens=1, seed=0, logprobs=self.probe_logprobs, **kw)
                break
            except ServerHTTPError as err:
                limit = self._logprobs_limit(err)
                if limit is None or limit >= self.probe_logprobs:
                    raise
                self.probe_logprobs = limit
        alts = ((out["choices"][0].get("logprobs") or {}).get("top_logprobs") or [None])[0] or {}
        seen = 0.0
        for key, value in alts.items():
            tid = self._token_id(str(key))
            if tid is None or tid >= self.n_vocab or value is None:
                continue
            row[tid] = float(value)
            seen += math.exp(float(value))
        unseen = max(0.0, 1.0 - seen)
        if unseen > 1e-9:
            row[self.UNSEEN] = math.log(unseen)
        with self._lock:
            self.stats["probe_requests"] += 1
            self.stats["probe_max_unseen"] = max(self.stats["probe_max_unseen"], unseen)
        return row

    @staticmethod
    def _logprobs_limit(err: ServerHTTPError) -> int | None:
        if err.status not in (400, 422) or "logprob" not in err.detail.lower():
            return None
        nums = [int(x) for x in re.findall(r"\d+", err.detail)]
        return min(nums) if nums else None

    # llama.cpp's logits depend on how many tokens are evaluated together (one alone vs several in a
    # batch: up to 0.2 nats apart on SmolLM2 Q4_1), and llama-cpp-python's server evaluates only what
    # follows the longest prefix it shares with the previous request, always re-evaluating at least the
    # last prompt token. To give the probe the in-process numerics (``forward``: the whole sequence in
    # chunks; ``branch_logits``: the prefix, then one token per step), a row of ``forward`` is preceded
    # by a one-token request that empties the shared prefix, and a continuation of k tokens is walked
    # one token per request. This holds while this client is the server's only one.

    def reset_prefix(self) -> None:
        """Make llama-cpp-python's server forget the prefix it shares with the next request (a one-token
        request), so the next prompt is evaluated whole, in chunks, as the in-process ``forward`` does."""
        if self.kind == "llama-cpp-python":
            self.complete([], "\n", max_tokens=1, **self._sampling(1.0, 1.0, 0, 0.0), check_length=False)

    def _walk(self, ids: Sequence[int], upto: int) -> None:
        if self.kind == "llama-cpp-python":
            for j in range(upto, len(ids)):
                text = self._text_of(ids[:j])
                if text is None:
                    return
                self.complete(ids[:j], text, max_tokens=1, **self._sampling(1.0, 1.0, 0, 0.0))

    def forward(self, ids: Sequence[int], positions: Sequence[int]) -> np.ndarray:
        ids = list(ids)
        if not positions:
            return np.empty((0, self.n_vocab + 1))
        rows = []
        for p in positions:
            self.reset_prefix()
            rows.append(self.next_logprobs(ids[: p + 1]))
        return np.stack(rows)

    def branch_logits(self, prefix_ids: Sequence[int], continuations: Sequence[Sequence[int]]) -> np.ndarray:
        rows = []
        for c in continuations:
            if any(int(t) >= self.n_vocab for t in c):  # past the unseen mass: stays unseen
                row = np.full(self.n_vocab + 1, -np.inf)
                row[self.UNSEEN] = 0.0
                rows.append(row)
            else:
                full = list(prefix_ids) + [int(t) for t in c]
                self._walk(full, len(prefix_ids) + 1)
                rows.append(self.next_logprobs(full))
        return np.stack(rows) if rows else np.empty((0, self.n_vocab + 1))

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


# ---------------------------------------------------------------------------------------------
# command-line options shared by `sample`, `probe` and `run`


def add_server_arguments(parser: Any) -> None:
    """``--base-url``, ``--api-key-env`` and ``--server-kind`` (used with ``--backend openai``)."""
    parser.add_argument(
        "--base-url", help="with --backend openai: the server's API root, e.g. http://127.0.0.1:8000/v1"
    )
    parser.add_argument(
        "--api-key-env", help="with --backend openai: environment variable holding the API key (Bearer)"
    )
    parser.add_argument(
        "--server-kind",
        default="auto",
        choices=KINDS,
        help="with --backend openai: the server (default: detect)",
    )


def server_kwargs(args: Any) -> dict[str, Any]:
    """``load_backend("openai", …)`` keyword arguments from the parsed options (one-line error without a URL)."""
    if not getattr(args, "base_url", None):
        raise ServerError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    return {"base_url": args.base_url, "api_key_env": args.api_key_env, "kind": args.server_kind}


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
