"""Behaviours of llama-cpp-python's server (0.3.36) that the `openai` backend works around, pinned down
against the real server, and the CLI through the server (the tool-calling arms: test_server_tools.py)."""

from __future__ import annotations

import json
import math

import jsonschema
import numpy as np
import pytest

from tooldecode.backends.openai import ServerHTTPError

pytestmark = pytest.mark.model

USER = [{"role": "user", "content": "Give me a JSON object."}]
GREEDY = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "seed": 0}


def _post(be, path: str, body: dict) -> dict:
    return be.http.request("POST", path, dict(body, model=be.server_model))


def test_token_id_prompts_refused_and_n_ignored(openai_smol):
    with pytest.raises(ServerHTTPError) as err:
        _post(openai_smol, "/completions", {"prompt": [1, 2, 3], "max_tokens": 1})
    # refused (as an HTTP 500 carrying the validation error): the backend sends text and checks the
    # server's tokenization of it
    assert err.value.status in (422, 500) and "valid string" in err.value.detail
    out = _post(openai_smol, "/completions", {"prompt": "Hi", "max_tokens": 2, "n": 3, **GREEDY})
    assert len(out["choices"]) == 1  # n is dropped: the backend asks once per sample


def test_response_format_only_json_object_and_silent_fallback(openai_smol):
    """`response_format` takes only {"type": "json_object", "schema": …}; a schema its converter cannot
    read (here an unanchored `pattern`, valid JSON Schema) silently becomes "any JSON"."""
    schema = {
        "type": "object",
        "properties": {"zq": {"type": "string", "pattern": "^x{1,3}$"}},
        "required": ["zq"],
        "additionalProperties": False,
    }
    body = {"messages": USER, "max_tokens": 24, **GREEDY}

    def content(rf: dict) -> str:
        return _post(openai_smol, "/chat/completions", dict(body, response_format=rf))["choices"][0][
            "message"
        ]["content"]

    ok = content({"type": "json_object", "schema": schema})
    jsonschema.validate(json.loads(ok), schema)
    # the OpenAI spelling is refused (HTTP 500 with the validation error), not translated
    with pytest.raises(ServerHTTPError) as err:
        content({"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}})
    assert err.value.status in (400, 422, 500) and "json_object" in err.value.detail
    # unanchored pattern: the converter fails, the server falls back to generic JSON without a word
    loose_schema = json.loads(json.dumps(schema).replace("^x{1,3}$", "x"))
    fallback = content({"type": "json_object", "schema": loose_schema})
    assert fallback.lstrip()[:1] in ("{", "[", '"') or fallback.lstrip()[:1].isdigit()
    with pytest.raises((ValueError, jsonschema.ValidationError)):
        jsonschema.validate(json.loads(fallback), loose_schema)  # validate against the schema, not "is JSON"


def test_logprobs_are_from_scores_before_the_grammar(openai_smol, llama_smol):
    """Completions `grammar` and chat `response_format`: the reported log-probabilities are the
    unconstrained model's (a forced token is reported at its raw probability, not ~1)."""
    prompt = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"
    out = _post(
        openai_smol,
        "/completions",
        {"prompt": prompt, "max_tokens": 4, "logprobs": 1, "grammar": 'root ::= "zqx"', **GREEDY},
    )
    choice = out["choices"][0]
    assert choice["text"] == "zqx"
    lps = choice["logprobs"]["token_logprobs"]
    ids = llama_smol.tokenize(prompt)
    row = np.asarray(llama_smol.forward(ids, [len(ids) - 1])[0], dtype=np.float64)
    first = llama_smol.tokenize("zqx")[0]
    raw = float(row[first] - row.max() - math.log(np.exp(row - row.max()).sum()))
    assert lps[0] < -3 and abs(lps[0] - raw) < 0.3  # raw (prompt evaluated whole, or its last token alone)
    chat = _post(
        openai_smol,
        "/chat/completions",
        {
            "messages": USER,
            "max_tokens": 8,
            "logprobs": True,
            "top_logprobs": 1,
            "response_format": {"type": "json_object", "schema": {"type": "string", "enum": ["zqxv"]}},
            **GREEDY,
        },
    )
    c = chat["choices"][0]
    assert json.loads(c["message"]["content"]) == "zqxv"
    assert min(t["logprob"] for t in c["logprobs"]["content"]) < -3


def test_cli_sample_and_probe_through_the_server(llama_server, capsys):
    from tooldecode.cli import main

    base = ["--model", "smollm2-135m-instruct", "--scenario", "py-mutable-default-cart"]
    rc = main(["sample", *base, "--variant", "fresh", "-n", "1", "--max-new-tokens", "4", "--json",
               "--backend", "openai", "--base-url", llama_server.base_url])  # fmt: skip
    assert rc == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["entropy"] is None and rec["verdict"] and rec["tokens"]
    rc = main(["sample", *base, "-n", "1", "--backend", "openai"])
    assert rc == 2 and "--base-url" in capsys.readouterr().err
