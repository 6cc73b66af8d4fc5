"""The ``interp`` command: argparse subcommands that only call library code."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from interpreter._version import __version__

if TYPE_CHECKING:
    from interpreter.settings import Settings

#: Where embedded services keep their state, under the per-user state directory.
EMBEDDED_STATE = "embedded"


class _SubCommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands whose one-line help is also their description in their own --help."""

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        kwargs.setdefault("description", kwargs.get("help"))
        return super().add_parser(name, **kwargs)


class _Parser(argparse.ArgumentParser):
    """Every (sub)command takes ``-v``, before or after the subcommand's name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _SubCommands)
        if self.add_help:  # not for argument-only parents
            self.add_argument(
                "-v",
                "--verbose",
                action="store_true",
                default=argparse.SUPPRESS,
                help="Log debug messages.",
            )


def _serve(args: argparse.Namespace) -> int:
    from interpreter import logs
    from interpreter.cli_settings import flag_overrides
    from interpreter.server import serve

    settings = _settings(flag_overrides(args), _log_format(args))
    if settings.policy_file is not None:
        from interpreter.policy.loader import PolicyFileError, load

        try:
            load(settings.policy_file)
        except PolicyFileError as exc:
            logs.complain(settings.log_format, "error", str(exc))
            return 2
    verbose = getattr(args, "verbose", False)
    logs.configure(settings.log_format, logging.DEBUG if verbose else logging.INFO)
    return serve(settings)


def _log_format(args: argparse.Namespace) -> Literal["text", "json"]:
    """The log format asked for, known before the settings are read: their warnings and
    errors are said in it."""
    chosen = getattr(args, "log_format", None) or os.environ.get("INTERP_LOG_FORMAT", "")
    return "json" if str(chosen).strip().lower() == "json" else "text"


def _settings(overrides: dict[str, Any], fmt: Literal["text", "json"] = "text") -> Settings:
    """Settings from the environment and ``overrides``, checked: unknown ``INTERP_*``
    variables are reported, and a bad value ends the command with one line (in ``fmt``)."""
    from interpreter import logs
    from interpreter.cli_settings import SettingsError, load, unknown_variables

    for warning in unknown_variables(os.environ):
        logs.complain(fmt, "warning", warning)
    try:
        return load(overrides)
    except SettingsError as exc:
        logs.complain(fmt, "error", str(exc))
        raise SystemExit(2) from None


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


def _audit_verify(args: argparse.Namespace) -> int:
    from interpreter.audit_verify import format_report, verify
    from interpreter.terminal import visible

    report = verify(Path(args.data_dir).expanduser(), args.session)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    elif report.error is not None:
        # Nothing could be checked (no record, an unknown session): a mistake of the
        # command's, said as the others are, and not the exit status of a broken chain.
        print(f"interp: error: {report.error}", file=sys.stderr)
    else:
        print(visible(format_report(report), lines=True))
    if report.error is not None:
        return 2
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    from interpreter.cli_settings import add_flags

    parser = _Parser(prog="interp", description="A stateful code interpreter for AI agents.")
    parser.add_argument("--version", action="version", version=f"interp {__version__}")
    # Also taken before the command's name (`interp --url URL sessions`), as other CLIs do.
    for flag, dest, what in (("--url", "root_url", "URL"), ("--api-key", "root_api_key", "key")):
        parser.add_argument(
            flag,
            dest=dest,
            metavar=what.upper(),
            default=argparse.SUPPRESS,
            help=f"The service {what} for the client commands (as their own {flag}).",
        )
    parser.add_argument(
        "-q",
        "--quiet",
        dest="root_quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="No progress messages, for the client commands (as their own -q).",
    )
    # Not ``required``: argparse would then say a COMMAND is missing before an unknown
    # option it met (``interp --bogus``); :func:`parse_args` says each in turn.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser(
        "serve", help="Run the HTTP service. Every setting is a flag here and an INTERP_* variable."
    )
    add_flags(serve)
    serve.set_defaults(func=_serve)

    images = sub.add_parser("images", help="Kernel container images.")
    images_sub = images.add_subparsers(dest="images_command", required=True, metavar="COMMAND")
    build = images_sub.add_parser("build", help="Build the kernel image (works offline).")
    build.add_argument(
        "--image",
        default=os.environ.get("INTERP_DOCKER_IMAGE", "interp-kernel:latest"),
        help="Image name (default $INTERP_DOCKER_IMAGE, else interp-kernel:latest).",
    )
    build.add_argument("--force", action="store_true", help="Rebuild even if up to date.")
    build.set_defaults(func=_images_build)

    openapi = sub.add_parser("openapi", help="Print (or write) the OpenAPI document.")
    openapi.add_argument("-o", "--output", help="Write to this file.")
    openapi.set_defaults(func=_openapi)

    audit = sub.add_parser("audit", help="The tamper-evident record of executions.")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True, metavar="COMMAND")
    check = audit_sub.add_parser(
        "verify",
        help="Check each session's hash chain, notebook and artifacts; name the first broken "
        "link (exit 1 if any; 2 if there is nothing to check: no state.db, no such session).",
    )
    check.add_argument(
        "--data-dir",
        default=os.environ.get("INTERP_DATA_DIR", ".data"),
        help="The service's data directory (default $INTERP_DATA_DIR, else ./.data).",
    )
    check.add_argument("--session", help="Check only this session.")
    check.add_argument("--json", action="store_true", help="Print the report as JSON.")
    check.set_defaults(func=_audit_verify)

    try:
        from interpreter.cli_client import add_commands
    except ImportError:  # the SDK's optional pieces are missing
        pass
    else:
        add_commands(sub, embedded_service)
    return parser


def embedded_state_dir() -> Path:
    """A fresh state directory for one embedded service, under the per-user state
    directory (``$XDG_STATE_HOME/interp`` on Linux), never the working directory: two
    MCP hosts may start ``interp mcp`` at once, and a broker owns its data directory."""
    import platformdirs

    root = Path(platformdirs.user_state_dir("interp")) / EMBEDDED_STATE
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return root / f"{stamp}-{os.getpid()}"


@contextlib.contextmanager
def embedded_service() -> Iterator[tuple[str, str | None]]:
    """Start the broker in this process on a free loopback port (other settings from
    INTERP_*); yields its URL and API key (none: a key from the environment is for the
    service at INTERP_URL, not for this one)."""
    from interpreter.datadir_lock import DataDirInUse
    from interpreter.server import ServerThread

    overrides: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 0,
        "api_keys": [],
        # Nobody reattaches to a per-run data directory: stop its kernels at exit.
        "keep_containers_on_shutdown": False,
    }
    if "INTERP_DATA_DIR" not in os.environ:
        overrides["data_dir"] = embedded_state_dir()
    settings = _settings(overrides)
    try:
        thread = ServerThread(settings).start()
    except DataDirInUse as exc:  # one line, as `interp serve` says it
        print(f"interp: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    try:
        backend = thread.broker.backend.name
        print(
            f"interp: embedded service ({backend} backend) on {thread.url}, "
            f"state in {settings.data_dir}",
            file=sys.stderr,
            flush=True,
        )
        yield thread.url, ""
    finally:
        thread.stop()


def _root_connection(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Give ``--url``/``--api-key`` written before the command to the command (its own
    flag, after its name, wins); refused for a command that takes no such flag."""
    for root, dest, flag in (
        ("root_url", "url", "--url"),
        ("root_api_key", "api_key", "--api-key"),
    ):
        if not hasattr(args, root):
            continue
        value = getattr(args, root)
        delattr(args, root)
        if args.command == "serve" or not hasattr(args, dest):
            hint = " (the keys it accepts go after 'serve')" if args.command == "serve" else ""
            parser.error(
                f"{flag} before the command is for the client commands (run, sessions, "
                f"notebook, ...); 'interp {args.command}' takes none{hint}."
            )
        if getattr(args, dest) is None:
            setattr(args, dest, value)
    if hasattr(args, "root_quiet"):
        delattr(args, "root_quiet")
        if not hasattr(args, "quiet"):
            parser.error(
                f"-q before the command is for the client commands (run, sessions, "
                f"notebook, ...); 'interp {args.command}' takes none."
            )
        args.quiet = True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's own usage, not the top-level one
        _chosen(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.error("the following arguments are required: COMMAND")
    _root_connection(parser, args)
    return args


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command parser that ``args`` went through last."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if name in action.choices:
                return _chosen(action.choices[name], args)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        result = args.func(args)
    except BrokenPipeError:
        # The reader went away (`interp sessions | head`): stop quietly, as shell tools do.
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if exc.filename is None:
            raise
        # A local file the command reads or writes (-o, --images, ...).
        print(f"interp: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if not _refused_by_the_sdk(exc):
            raise
        # Refused before anything was sent (an API key that cannot be one, ...), or an
        # answer a command did not expect.
        from interpreter.cli_client import service_error_text

        print(f"interp: {service_error_text(exc)}", file=sys.stderr)
        return 2
    return int(result or 0)


def _refused_by_the_sdk(exc: Exception) -> bool:
    """Whether ``exc`` is one of the SDK's errors (looked up only if the SDK was loaded:
    ``interp serve`` does not load it, and could not have raised one)."""
    errors = sys.modules.get("interpreter.client._errors")
    return errors is not None and isinstance(exc, errors.ClientError)


#: What a shell reports for a command ended by SIGPIPE (128 + 13).
EXIT_BROKEN_PIPE = 141


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that Python's final flush raises nothing more."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
