"""Shared fixtures: real models only (the smallest one wherever any model will do)."""

from __future__ import annotations

import pytest

from tooldecode.models import DEFAULT_MODEL, TEST_MODEL, resolve


@pytest.fixture(scope="session")
def smol_ref():
    return resolve(TEST_MODEL, fetch=True)


@pytest.fixture(scope="session")
def qwen_ref():
    return resolve(DEFAULT_MODEL, fetch=True)


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
        import sys

        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log_path = log_path
        cmd = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(model_path),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--n_ctx", "4096",
            "--n_threads", "2",
            "--n_threads_batch", "2",
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
