"""The ``interp`` command: argparse subcommands that only call library code."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from interpreter._version import __version__


def _serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from interpreter import logs
    from interpreter.server import serve
    from interpreter.settings import Settings, settings_problem

    overrides: dict[str, object] = {}
    for name in ("host", "port", "backend", "data_dir"):
        value = getattr(args, name)
        if value is not None:
            overrides[name] = value
    if args.api_key:
        overrides["api_keys"] = args.api_key
    if args.pool_size is not None:
        overrides["pool_size"] = args.pool_size
    if args.log_format is not None:
        overrides["log_format"] = args.log_format
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        print(f"error: {settings_problem(exc)}", file=sys.stderr)
        return 2
    logs.configure(settings.log_format, logging.DEBUG if args.verbose else logging.INFO)
    return serve(settings)


def _images_build(args: argparse.Namespace) -> int:
    from interpreter.errors import BackendUnavailable
    from interpreter.image import ImageBuildError, build_image

    try:
        image_id = build_image(
            args.image, force=args.force, progress=lambda line: print(line, flush=True)
        )
    except (ImageBuildError, BackendUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"image {args.image} is ready ({image_id})")
    return 0


def _openapi(args: argparse.Namespace) -> int:
    from interpreter.openapi import openapi_document

    text = json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="interp", description="A stateful code interpreter for AI agents."
    )
    parser.add_argument("--version", action="version", version=f"interp {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="Log debug messages.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="Run the HTTP service.")
    serve.add_argument("--host", help="Address to bind (default 127.0.0.1).")
    serve.add_argument("--port", type=int, help="Port (default 8700; 0 = any free port).")
    serve.add_argument(
        "--backend",
        choices=["local", "docker", "auto"],
        help="Kernel backend (default auto: docker when available).",
    )
    serve.add_argument("--data-dir", type=Path, help="State directory (default ./.data).")
    serve.add_argument(
        "--api-key",
        action="append",
        default=[],
        help="Accepted API key (repeatable; also INTERP_API_KEYS, comma-separated).",
    )
    serve.add_argument("--pool-size", type=int, help="Warm docker kernels kept ready.")
    serve.add_argument(
        "--log-format",
        choices=["text", "json"],
        help="Log lines as text (default) or one JSON object each (INTERP_LOG_FORMAT).",
    )
    serve.set_defaults(func=_serve)

    images = sub.add_parser("images", help="Kernel container images.")
    images_sub = images.add_subparsers(dest="images_command", required=True)
    build = images_sub.add_parser("build", help="Build the kernel image (works offline).")
    build.add_argument(
        "--image", default=os.environ.get("INTERP_DOCKER_IMAGE", "interp-kernel:latest")
    )
    build.add_argument("--force", action="store_true", help="Rebuild even if up to date.")
    build.set_defaults(func=_images_build)

    openapi = sub.add_parser("openapi", help="Print (or write) the OpenAPI document.")
    openapi.add_argument("-o", "--output", help="Write to this file.")
    openapi.set_defaults(func=_openapi)

    try:
        from interpreter.cli_client import add_commands
    except ImportError:  # the SDK's optional pieces are missing
        pass
    else:
        add_commands(sub, embedded_service)
    return parser


@contextlib.contextmanager
def embedded_service() -> Iterator[tuple[str, str | None]]:
    """Start the broker in this process on a free loopback port (settings from INTERP_*);
    yields its URL and API key (none: a key from the environment is not for it)."""
    from interpreter.server import ServerThread
    from interpreter.settings import Settings

    overrides: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "api_keys": []}
    with ServerThread(Settings(**overrides)) as thread:
        print(f"interp: embedded service on {thread.url}", file=sys.stderr, flush=True)
        yield thread.url, ""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    result = args.func(args)
    return int(result or 0)
