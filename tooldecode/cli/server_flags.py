"""The options of ``--backend openai`` that ``sample``, ``probe`` and ``run`` share: ``--base-url``,
``--api-key-env`` and ``--server-kind``, their check, and the backend's keyword arguments from them."""

from __future__ import annotations

import argparse
from typing import Any

from tooldecode.backends.openai_http import KINDS, ServerError


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--base-url``, ``--api-key-env`` and ``--server-kind`` (used with ``--backend openai``)."""
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


def check_server_flags(args: argparse.Namespace, backend: str | None = None) -> None:
    """Refuse a server flag given without ``--backend openai`` (it would be ignored).

    Parameters
    ----------
    args
        The parsed options.
    backend
        The backend the command runs on (default: ``args.backend``).

    Raises
    ------
    ServerError
        One line naming the flag, when the backend is not ``openai``.
    """
    backend = backend if backend is not None else getattr(args, "backend", None)
    if backend == "openai":
        _check_credentials(args)
        return
    for flag, attr in (("--base-url", "base_url"), ("--api-key-env", "api_key_env")):
        if getattr(args, attr, None):
            raise ServerError(
                f"{flag} is used only with --backend openai (the backend is {backend}); add it or drop {flag}"
            )
    if getattr(args, "server_kind", "auto") != "auto":
        raise ServerError(f"--server-kind is used only with --backend openai (the backend is {backend})")


def _check_credentials(args: argparse.Namespace) -> None:
    """Before any model loads: no credentials in ``--base-url``, and a key that can travel in a header
    (each refusal one line that never shows the key)."""
    import os

    from tooldecode.errors import ToolDecodeError
    from tooldecode.guard import check_api_key, check_base_url

    try:
        if getattr(args, "base_url", None):
            check_base_url(args.base_url)
        env = getattr(args, "api_key_env", None)
        if env and os.environ.get(env):
            check_api_key(os.environ[env], f"--api-key-env {env}")
    except ToolDecodeError as err:
        raise ServerError(str(err)) from None


def server_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``load_backend("openai", …)`` keyword arguments from the parsed options.

    Raises
    ------
    ServerError
        One line, when ``--base-url`` is missing.
    """
    if not getattr(args, "base_url", None):
        raise ServerError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    return {"base_url": args.base_url, "api_key_env": args.api_key_env, "kind": args.server_kind}
