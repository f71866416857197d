"""The `openai` backend against a server (llama-cpp-python's own, or vLLM with --url) vs the in-process llama.cpp backend,
measured side by side in one run (ratios are the result, not the absolute times).

Starts `python -m llama_cpp.server` on 127.0.0.1 (a free port) with the model, then prints `name: value`:
- `server_over_inprocess_loose_samples_per_s`: loose samples/s through the server (one request per sample,
  its prefix cache active, no logprobs) ÷ in-process batched sampling, same prompt and budget;
- `server_logprobs_over_inprocess_samples_per_s`: the same with `logprobs=20` (equal work per token: the
  in-process sampler always keeps log-probabilities and top-k);
- `server_logprobs_over_no_logprobs`: the server's samples/s with `logprobs=20` ÷ without (llama-cpp-python
  computes log-softmax over the whole prompt's logits per request);
- `server_probe_request_s`: seconds for one whole-vocabulary next-token request (the probe's unit).

Usage: python benchmarks/bench_server.py [--model smollm2-135m-instruct] [--samples 8] [--tokens 32]
       python benchmarks/bench_server.py --model qwen2.5-coder-0.5b-instruct --url http://127.0.0.1:8021/v1
(the second: a vLLM server already serving that model, e.g. as docs/scale-out.md starts it on CPU)
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tooldecode.backends import load_backend
from tooldecode.models import resolve
from tooldecode.prompts import parse_variant, render_prompt
from tooldecode.sampling import SamplingParams, sample
from tooldecode.scenarios import get_scenario


def _server(model_path: Path, log: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "4096", "--flash_attn", "true"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"server exited: see {log}")
        try:
            urllib.request.urlopen(url + "/models", timeout=2).close()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not start")


def _measure(url: str, ref, prompt, params, samples: int) -> None:
    srv = load_backend("openai", ref, base_url=url)
    loc = load_backend("llamacpp", ref, n_ctx=4096, max_seqs=samples + 1)
    try:
        srv.sample(prompt.text, 1, params, logprobs=False)  # warm: prompt cached on both sides
        sample(loc, prompt.text, 1, params)

        def rate(fn) -> float:
            t = time.perf_counter()
            out = fn()
            return len(out) / (time.perf_counter() - t)

        r_srv = rate(lambda: srv.sample(prompt.text, samples, params, start_index=1, logprobs=False))
        r_srv_lp = rate(lambda: srv.sample(prompt.text, samples, params, start_index=1))
        r_loc = rate(lambda: sample(loc, prompt.text, samples, params, start_index=1))
        ids = loc.tokenize(prompt.text)
        t = time.perf_counter()
        srv.forward(ids, [len(ids) - 1])
        probe_s = time.perf_counter() - t
        print(f"server_kind: {srv.kind}")
        print(f"server_loose_samples_per_s: {r_srv:.3f}")
        print(f"inprocess_loose_samples_per_s: {r_loc:.3f}")
        print(f"server_over_inprocess_loose_samples_per_s: {r_srv / r_loc:.3f}")
        print(f"server_logprobs_over_no_logprobs: {r_srv_lp / r_srv:.3f}")
        # equal work per token (the in-process sampler always keeps log-probabilities and top-k)
        print(f"server_logprobs_over_inprocess_samples_per_s: {r_srv_lp / r_loc:.3f}")
        print(f"server_probe_request_s: {probe_s:.3f}")
    finally:
        srv.close()
        loc.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--scenario", default="py-mutable-default-cart")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument(
        "--url",
        help="an already-running server serving the same model (e.g. vLLM: http://127.0.0.1:8021/v1); "
        "default: start llama-cpp-python's server",
    )
    args = ap.parse_args()
    ref = resolve(args.model, fetch=True)
    prompt = render_prompt(get_scenario(args.scenario), ref, parse_variant("fresh"))
    params = SamplingParams(max_new_tokens=args.tokens, stop=tuple(prompt.stop), seed=0, top_logprobs=20)
    if args.url:
        _measure(args.url, ref, prompt, params, args.samples)
        return
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = _server(ref.path, Path(tmp) / "server.log")
        try:
            _measure(url, ref, prompt, params, args.samples)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
