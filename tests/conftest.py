"""Shared fixtures: real models only (the smallest one wherever any model will do), loaded once per
session; the guard that keeps model loads to tests marked ``model``; the sample record factory."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import model_guard
import pytest

from tooldecode.models import DEFAULT_MODEL, TEST_MODEL, resolve

# --- the model guard (tests/model_guard.py) ---------------------------------------------------------
# Every model load, in this process or a Python subprocess a test starts, is appended to one file; a test
# that loaded one without a `model` mark fails, and under `make test-fast` (TOOLDECODE_TEST_FAST=1) the
# load itself raises, so the fast suite loads no weights.

_GUARD_DIR = Path(tempfile.mkdtemp(prefix="tooldecode-guard-"))
(_GUARD_DIR / "sitecustomize.py").write_text("import model_guard\nmodel_guard.install()\n")
_LOADS = _GUARD_DIR / "loads.txt"
_LOADS.touch()
os.environ[model_guard.LOADS_ENV] = str(_LOADS)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(_GUARD_DIR), str(Path(__file__).parent), *filter(None, [os.environ.get("PYTHONPATH")])]
)
model_guard.install()
_START = pytest.StashKey[int]()

# One thread per model (llama.cpp, transformers and training alike: tooldecode.backends.base.cpu_threads),
# here and in the servers and CLI subprocesses tests start (override by setting TOOLDECODE_THREADS): the
# test models are tiny, and with two threads per worker on 2 busy cores the threads wait on each other
# (SmolLM2's sampling tests ran 2.5-3.5x slower in llama.cpp; a 600-token transformers forward 1.5x).
os.environ.setdefault("TOOLDECODE_THREADS", "1")

# Prompt KV at aligned prefixes, on disk (tooldecode.backends.prefix_store): the tests evaluate the same
# scenario prompts again and again, and every prompt of a model shares its first chunks (the system turn
# and the tools). A restored prefix gives the logits of a fresh evaluation bit for bit
# (tests/test_prefix_store.py, which sets its own folder). One folder for every worker and later runs;
# deleting it loses nothing. TOOLDECODE_PREFIX_CACHE= (empty) turns it off.
os.environ.setdefault(
    "TOOLDECODE_PREFIX_CACHE",
    str(Path(os.environ.get("TOOLDECODE_HOME", "~/.cache/tooldecode")).expanduser() / "prefix-kv-tests"),
)
# json-repair's results on disk (tooldecode.repair.memo): the FINDINGS rebuild and the repair tests hand
# it the same thousands of call texts every run. TOOLDECODE_JSONREPAIR_MEMO= (empty) turns it off.
os.environ.setdefault(
    "TOOLDECODE_JSONREPAIR_MEMO",
    str(Path(os.environ.get("TOOLDECODE_HOME", "~/.cache/tooldecode")).expanduser() / "json-repair-tests"),
)


def pytest_collection_modifyitems(config, items):
    """Files in order of their expected cost (slow tests, then model tests, then the rest), each file's
    tests together and in their written order: under pytest-xdist's ``--dist loadfile`` (``make test``)
    the workers start on the longest files, so no long file is left to run alone at the end."""

    def cost(item):
        if item.get_closest_marker("slow"):
            return 30.0
        return 3.0 if item.get_closest_marker("model") else 0.05

    per_file: dict[str, float] = {}
    for item in items:
        per_file[item.nodeid.split("::")[0]] = per_file.get(item.nodeid.split("::")[0], 0.0) + cost(item)
    rank = {f: -c for f, c in per_file.items()}
    items.sort(key=lambda it: rank[it.nodeid.split("::")[0]])  # stable: a file's own order is kept


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_START] = _LOADS.stat().st_size
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if call.when != "teardown" or _START not in item.stash or item.get_closest_marker("model"):
        return
    with open(_LOADS, encoding="utf-8") as f:
        f.seek(item.stash[_START])
        loads = [line.split(" ", 1)[1].strip() for line in f if line.strip()]
    if loads:
        rep.outcome = "failed"
        rep.longrepr = f"{item.nodeid} loaded {'; '.join(sorted(set(loads)))} without @pytest.mark.model"


def pytest_sessionfinish(session):
    import shutil

    shutil.rmtree(_GUARD_DIR, ignore_errors=True)


def _ref(model: str):
    """The model, fetched on first use; in the fast suite never fetched: a test that needs it (for its
    chat template or vocabulary) skips when the model home does not have it."""
    if model_guard.fast_mode():
        from tooldecode.errors import ModelError

        try:
            return resolve(model)
        except ModelError:
            pytest.skip(f"{model} is not fetched, and make test-fast fetches no weights")
    return resolve(model, fetch=True)


@pytest.fixture(scope="session")
def smol_ref():
    return _ref(TEST_MODEL)


@pytest.fixture(scope="session")
def qwen_ref():
    return _ref(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def llama_smol(smol_ref):
    from tooldecode.backends import load_backend

    be = load_backend("llamacpp", smol_ref, n_ctx=4096, max_seqs=16)
    yield be
    be.close()


@pytest.fixture(scope="session")
def hf_smol(smol_ref):
    from tooldecode.backends import load_backend

    return load_backend("hf", smol_ref)


@pytest.fixture(scope="session")
def llama_qwen(qwen_ref):
    from tooldecode.backends import load_backend

    be = load_backend("llamacpp", qwen_ref, n_ctx=4096, max_seqs=16)
    yield be
    be.close()


# the tiny spec of test_safety and test_fresh (SMALL there): one scenario, two loose samples of 8 tokens
SMALL_SPEC = f"""
name = "tiny"
models = ["{TEST_MODEL}"]
scenarios = ["json-tsconfig-path-aliases"]
n = 2
max_new_tokens = 8
modes = ["loose"]
batch_size = 2
"""


@pytest.fixture(scope="session")
def small_run(tmp_path_factory, smol_ref):
    """(spec, run folder) of one finished run of ``SMALL_SPEC``, made once per session; tests copy the
    folder before changing anything."""
    from tooldecode.experiments import load_spec, run_spec

    root = tmp_path_factory.mktemp("small")
    (root / "s.toml").write_text(SMALL_SPEC)
    spec = load_spec(root / "s.toml")
    run_spec(spec, root / "run", progress=False)
    return spec, root / "run"


# --- llama-cpp-python's own OpenAI-compatible server (the `openai` backend's tests) ----------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """``python -m llama_cpp.server`` serving one model on 127.0.0.1 (a free port), started and stopped
    by the tests. Flash attention is on, as in the in-process llama.cpp backend (llama.cpp's default
    on CPU); the server's own default (off) gives different logits."""

    def __init__(self, model_path, log_path, *, port: int | None = None, flash_attn: bool = True) -> None:
        import subprocess

        model_guard.record(f"llama_cpp.server with {model_path}")
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log_path = log_path
        cmd = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(model_path),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--n_ctx", "4096",
            "--n_threads", os.environ["TOOLDECODE_THREADS"],
            "--n_threads_batch", os.environ["TOOLDECODE_THREADS"],
            "--flash_attn", "true" if flash_attn else "false",
        ]  # fmt: skip
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        self.wait_ready()

    def wait_ready(self, timeout: float = 120.0) -> None:
        import time
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = open(self.log_path, "rb").read()[-2000:].decode("utf-8", "replace")
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer on {self.base_url} within {timeout:.0f} s")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except Exception:
                self.kill()
        self._log.close()


@pytest.fixture(scope="session")
def llama_server(smol_ref, tmp_path_factory):
    """SmolLM2 behind llama-cpp-python's server for the whole session; torn down at the end."""
    server = LlamaServer(smol_ref.path, tmp_path_factory.mktemp("llama-server") / "server.log")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def openai_smol(smol_ref, llama_server):
    """The `openai` backend talking to ``llama_server``."""
    from tooldecode.backends import load_backend

    be = load_backend("openai", smol_ref, base_url=llama_server.base_url)
    yield be
    be.close()


# --- sample records -----------------------------------------------------------------------------------

RECORD_ARM = {"model": TEST_MODEL, "backend": "llamacpp", "mode": "loose", "temperature": 1.0}


def make_sample(text: str = "", *, arm: dict | None = None, **fields) -> dict:
    """One raw sample record (a line of ``samples.jsonl``) as the runner writes it, checked by
    ``tooldecode.records.SampleRecord``: ``arm`` fields and record fields given override the defaults
    (SmolLM2, loose, scenario ``c-config-trim-crlf``, seed 0, index 0, no prefill); the key is built
    from the arm's label unless given; ``omit=(...)`` drops fields (a record from an older writer)."""
    from tooldecode.records import SampleRecord, label

    omit = fields.pop("omit", ())
    a = {**RECORD_ARM, **(arm or {})}
    rec = {
        "key": None,
        "arm": a,
        "scenario": "c-config-trim-crlf",
        "seed": 0,
        "index": 0,
        "prompt_sha256": "0" * 64,
        "prefill": "",
        "text": text,
        "token_ids": None,
        "logprobs": None,
        "top": None,
        "entropy": None,
        "entropy_masked": None,
        "mask_removed": None,
        "finish_reason": "stop",
        "error": None,
        "timing": {},
    }
    rec.update(fields)
    if rec["key"] is None:
        rec["key"] = f"{label(a)}/{rec['scenario']}/{rec['seed']}/{rec['index']}"
    rec = SampleRecord.from_json(rec).to_json()
    return {k: v for k, v in rec.items() if k not in omit}


def make_record(text: str = "", *, arm: dict | None = None, **fields):
    """``make_sample`` read into a ``tooldecode.records.SampleRecord`` (what the stages after the store take);
    a per-scenario ``stream`` unless one is given."""
    from tooldecode.records import SampleRecord

    fields.setdefault("stream", 1)
    return SampleRecord.from_json(make_sample(text, arm=arm, **fields))


def make_probe_row(**fields):
    """One ``tooldecode.records.ProbeRow`` (a line of ``probe.jsonl``): ``fields`` over neutral defaults
    (a close at ``newText`` of scenario ``s0``, no key-resolved mass)."""
    from tooldecode.records import ProbeRow

    row = {
        "index": 0, "path": "edits[0].newText", "after": "newText", "container": "object",
        "actual": "close", "p_close": 1.0, "p_continue": 0.0, "p_other": 0.0, "p_undetermined": 0.0,
        "entropy": 0.0, "boundary": 0, "pending": '"', "top": [], "value_chars": 1, "value_lines": 1,
        "value_escapes": 0, "continuations": None, "p_continue_by_kind": {},
        "p_continue_undetermined": 0.0, "p_other_by_kind": {}, "continue_keys": {},
        "decision_entropy": 0.0, "model": TEST_MODEL, "variant": {}, "variant_label": "",
        "scenario": "s0", "wire": "call-json", "n_items": 1, "item_index": 0,
    }  # fmt: skip
    row.update(fields)
    return ProbeRow.from_json(row)


@pytest.fixture
def sample_record():
    """``make_sample``: build a raw sample record (see there)."""
    return make_sample
