"""Client-side ``interp`` commands: run, sessions, notebook, html, replay, tools, mcp.

They only call the SDK (and nbconvert, the replay module or the MCP server); the service
may run anywhere. Every command returns its exit status: 0 success, 1 the code or the
replay failed, 2 the service refused or could not be reached, 130 interrupted (Ctrl-C),
143 stopped by SIGTERM (``interp run``: interrupted as for Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

from interpreter.cli_approvals import KEY_HELP as APPROVALS_KEY_HELP
from interpreter.cli_approvals import add_approvals_command
from interpreter.cli_mcp import add_mcp_command
from interpreter.client import (
    API_KEY_ENV,
    DEFAULT_URL,
    URL_ENV,
    APIError,
    ApprovalRequiredEvent,
    Artifact,
    Client,
    ClientError,
    DoneEvent,
    ErrorEvent,
    OutputEvent,
    Session,
    StderrEvent,
    StdoutEvent,
)
from interpreter.client.render import readable_text, strip_ansi
from interpreter.mime import is_image
from interpreter.models import Approval
from interpreter.policy.explain import policy_text
from interpreter.terminal import visible

EXIT_OK, EXIT_FAILED, EXIT_SERVICE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: ``interp run`` stopped by SIGTERM (128 + 15, as a shell reports it).
EXIT_TERMINATED = 143


class Terminated(BaseException):
    """SIGTERM arrived: raised in the main thread so that ``interp run`` cleans up as
    for Ctrl-C (a BaseException, as KeyboardInterrupt is, so no ``except Exception``
    swallows it)."""


def _raise_terminated(signum: int, frame: object) -> None:
    # Once: a second SIGTERM must not cut short the interrupt and delete the first began.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated


class Progress:
    """Status lines on stderr for people (silent with ``--quiet``)."""

    def __init__(self, quiet: bool, stream: IO[str] | None = None) -> None:
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.started = time.monotonic()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            elapsed = time.monotonic() - self.started
            print(f"[{elapsed:6.1f}s] {message}", file=self.stream, flush=True)


#: ``--url`` of the commands that start an embedded service without one.
EMBEDDING_URL_HELP = f"Service URL (default ${URL_ENV}; without either, an embedded service)."


def _connection_parent(
    key_help: str = f"API key (default ${API_KEY_ENV}).",
    url_help: str = f"Service URL (default ${URL_ENV}, else {DEFAULT_URL}).",
) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--url", default=None, help=url_help)
    parent.add_argument("--api-key", default=None, help=key_help)
    parent.add_argument("-q", "--quiet", action="store_true", help="No progress messages.")
    return parent


def _client(args: argparse.Namespace, *, timeout: float = 60.0) -> Client:
    return Client(args.url, api_key=args.api_key, timeout=timeout)


def _explicit_url(args: argparse.Namespace) -> str | None:
    """The URL the user chose (flag or environment), or None to start an embedded service."""
    return args.url or os.environ.get(URL_ENV) or None


def service_error_text(exc: Exception) -> str:
    """What ``interp`` says of an SDK error: its text, except where the SDK's advice is
    for code (``api_key=``) and a person at the shell needs the CLI's own (``--api-key``)."""
    if isinstance(exc, APIError) and exc.details.get("api_key_sent") is False:
        return (
            f"this service needs an API key and none was sent: give --api-key KEY or set "
            f"{API_KEY_ENV} ({exc.code}, HTTP {exc.status})"
        )
    return str(exc)


def _service_error(exc: ClientError) -> int:
    print(f"interp: {service_error_text(exc)}", file=sys.stderr)
    return EXIT_SERVICE


# --------------------------------------------------------------------------------- run


def _print_output(event: OutputEvent, images_dir: Path | None, session: Session) -> None:
    data = event.output.data
    has_image = any(is_image(ref.mime) for ref in event.output.artifacts)
    # A figure's text form ("<Figure size 640x480 ...>") says nothing the image line doesn't.
    # Markdown, HTML and JSON displays read as their text, not "<...Markdown object>".
    text = None if has_image else readable_text(data)
    if text is not None:
        sys.stdout.write(text.rstrip("\n") + "\n")
    for ref in event.output.artifacts:
        line = f"[{ref.mime}, {ref.size} bytes]"
        if images_dir is not None and is_image(ref.mime):
            path = Artifact(ref, functools.partial(session.artifact, ref)).save(images_dir)
            line = f"[{ref.mime} saved to {path}]"
        sys.stdout.write(line + "\n")
    sys.stdout.flush()


def say_held(approval: Approval, what: str = "") -> None:
    """Say on stderr that code waits for an operator's decision (else nothing shows)."""
    why = visible(approval.message or approval.rule or "rule (default)")
    print(
        f"interp: {what}held for approval {approval.id} ({why}); waiting for an operator",
        file=sys.stderr,
        flush=True,
    )


def stream_to_terminal(
    session: Session, code: str, *, timeout_s: float | None, images_dir: Path | None
) -> int:
    """Run code, echo its output as it comes; the exit status says whether it succeeded."""
    for event in session.stream(code, timeout_s=timeout_s):
        if isinstance(event, StdoutEvent):
            sys.stdout.write(event.text)
            sys.stdout.flush()
        elif isinstance(event, StderrEvent):
            sys.stderr.write(event.text)
            sys.stderr.flush()
        elif isinstance(event, OutputEvent):
            _print_output(event, images_dir, session)
        elif isinstance(event, ErrorEvent):
            tb = "\n".join(event.error.traceback) or f"{event.error.ename}: {event.error.evalue}"
            sys.stderr.write(strip_ansi(tb).rstrip("\n") + "\n")
        elif isinstance(event, ApprovalRequiredEvent):
            say_held(event.approval)
        elif isinstance(event, DoneEvent):
            execution = event.execution
            if execution.status not in ("ok", "error"):
                reason = f" ({execution.reason})" if execution.reason else ""
                print(
                    f"interp: execution ended with status {execution.status}{reason}",
                    file=sys.stderr,
                )
            if policy_text(execution):
                print(f"interp: {policy_text(execution)}", file=sys.stderr)
            if execution.state_lost:
                print(
                    "interp: the kernel was restarted; the session's state is lost", file=sys.stderr
                )
            return EXIT_OK if execution.status == "ok" else EXIT_FAILED
    return EXIT_FAILED  # pragma: no cover - stream() always ends with DoneEvent or raises


def _session_for(
    client: Client, session_id: str | None, progress: Progress
) -> tuple[Session, bool]:
    """The session ``session_id`` names, or a new one; and whether it is new."""
    if session_id:
        return client.get_session(session_id), False
    progress("starting a session...")
    session = client.create_session()
    try:
        progress(f"session {session.id} ready")
    except BaseException:
        # The caller never learns of it (a reader that went away: `interp run ... |
        # head -1` died on this line and left the session running): deleted here.
        with contextlib.suppress(ClientError):
            session.close()
        raise
    return session, True


def cmd_run(args: argparse.Namespace) -> int:
    """``interp run FILE.py`` / ``interp run -c CODE``."""
    if args.code is not None:
        code = args.code
    elif args.file == "-":
        code = sys.stdin.read()
    elif args.file:
        try:
            code = Path(args.file).read_text(encoding="utf-8")
        except OSError as exc:
            print(f"interp: cannot read {args.file}: {exc}", file=sys.stderr)
            return EXIT_SERVICE
        except UnicodeDecodeError as exc:
            print(
                f"interp: cannot read {args.file}: it is not UTF-8 text (byte {exc.start}); "
                "save it as UTF-8, as Python source is",
                file=sys.stderr,
            )
            return EXIT_SERVICE
    else:
        print("interp run: give a FILE or -c CODE", file=sys.stderr)
        return EXIT_SERVICE
    if args.images:
        Path(args.images).mkdir(parents=True, exist_ok=True)
    # Ctrl-C must interrupt the code even when this process was started with SIGINT
    # ignored (what a non-interactive shell does to background jobs); SIGTERM (kill, a
    # supervisor, a timeout) does the same, with its own exit status.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_terminated)
    progress = Progress(args.quiet)
    with _client(args) as client:
        session: Session | None = None
        created = False
        try:
            session, created = _session_for(client, args.session, progress)
            try:
                status = stream_to_terminal(
                    session,
                    code,
                    timeout_s=args.timeout,
                    images_dir=Path(args.images) if args.images else None,
                )
            except (KeyboardInterrupt, Terminated) as stop:
                progress("interrupting...")
                session.interrupt()
                return EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED
            progress(f"done ({'ok' if status == EXIT_OK else 'failed'})")
            return status
        except ClientError as exc:
            return _service_error(exc)
        except (KeyboardInterrupt, Terminated) as stop:  # before the code ran
            return EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED
        finally:
            if session is not None and created:
                if args.keep:
                    print(f"session: {session.id}", file=sys.stderr)
                else:
                    try:
                        session.close()
                    except ClientError as exc:
                        print(f"interp: could not delete session: {exc}", file=sys.stderr)


# ---------------------------------------------------------------------------- sessions


def format_table(rows: list[list[str]], header: list[str]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    return "\n".join(lines)


def cmd_sessions(args: argparse.Namespace) -> int:
    """``interp sessions``: a table of this key's sessions."""
    try:
        with _client(args) as client:
            sessions = client.list_sessions(args.state)
    except ClientError as exc:
        return _service_error(exc)
    if args.json:
        print(json.dumps([json.loads(s.model_dump_json()) for s in sessions], indent=2))
        return EXIT_OK
    if not sessions:
        print("no sessions")
        return EXIT_OK
    rows = [
        [
            s.id,
            s.status,
            s.backend,
            str(s.execution_count),
            s.created_at.astimezone().strftime("%Y-%m-%d %H:%M:%S"),
            s.last_activity_at.astimezone().strftime("%Y-%m-%d %H:%M:%S"),
        ]
        for s in sessions
    ]
    print(format_table(rows, ["ID", "STATUS", "BACKEND", "EXECS", "CREATED", "LAST ACTIVE"]))
    return EXIT_OK


# --------------------------------------------------------------------- notebook / html


def _write_text(path: str | None, text: str) -> None:
    if path in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(path).write_text(text, encoding="utf-8")


def _session_notebook(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    """The notebook of the session ``args.session`` (raises ClientError)."""
    with _client(args) as client:
        progress(f"fetching the notebook of {args.session}...")
        return client.get_session(args.session).notebook()


def cmd_notebook(args: argparse.Namespace) -> int:
    """``interp notebook SESSION -o out.ipynb``."""
    progress = Progress(args.quiet)
    try:
        nb = _session_notebook(args, progress)
    except ClientError as exc:
        return _service_error(exc)
    _write_text(args.output, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    if args.output not in (None, "-"):
        progress(f"wrote {args.output} ({len(nb.get('cells', []))} cells)")
    return EXIT_OK


#: The export's Content-Security-Policy: no script of any kind (inline, event handler,
#: ``javascript:`` link, a script in an ``<iframe srcdoc>``), nothing loaded from anywhere
#: but the page itself (images are data URIs, styles inline), no form posts, no ``<base>``.
EXPORT_CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:; "
    "base-uri 'none'; form-action 'none'"
)

# A ``<meta http-equiv=...>`` in an output (a refresh that sends the reader elsewhere).
_META_EQUIV = re.compile(r"<meta\b[^>]*\bhttp-equiv\b[^>]*>", re.IGNORECASE)


def notebook_to_html(nb: dict[str, Any]) -> str:
    """Render a notebook as one self-contained HTML page (images inlined as data URIs).

    The outputs are the agent's: an HTML display may carry a ``<script>``. The page gets a
    Content-Security-Policy (:data:`EXPORT_CSP`) as the first element of its head, so
    that no script runs when a reviewer opens it (the artifacts are served with a CSP
    sandbox for the same reason); tables, images and SVG still show. nbconvert's own
    ``sanitize_html`` is not used: it escapes ``<th>``, ``<tbody>`` and headings, so a
    DataFrame would show as tag soup. MathJax and Mermaid, which the template loads from a
    CDN, are blocked too: LaTeX shows as its source.
    """
    import nbformat
    from nbconvert import HTMLExporter

    node = nbformat.from_dict(nb)  # type: ignore[no-untyped-call]
    exporter = HTMLExporter(embed_images=True)  # type: ignore[no-untyped-call]
    # Its accessibility lint ("alternative text is missing") is noise for a generated page.
    exporter.log.setLevel(logging.ERROR)
    body, _ = exporter.from_notebook_node(node)
    page = _META_EQUIV.sub("", str(body))
    csp = f'<meta http-equiv="Content-Security-Policy" content="{EXPORT_CSP}"/>'
    head = re.search(r"<head\b[^>]*>", page, re.IGNORECASE)
    if head is None:  # not nbconvert's page: make sure the policy still comes first
        return csp + "\n" + page
    return page[: head.end()] + "\n" + csp + page[head.end() :]


def cmd_html(args: argparse.Namespace) -> int:
    """``interp html SESSION -o out.html``."""
    progress = Progress(args.quiet)
    try:
        import nbconvert  # noqa: F401
    except ImportError:
        print("interp html needs nbconvert: pip install 'interp[html]'", file=sys.stderr)
        return EXIT_SERVICE
    if Path(args.session).is_file():
        # A notebook file (exported earlier, or from JupyterLab): no service needed.
        try:
            nb = json.loads(Path(args.session).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"interp: cannot read notebook {args.session}: {exc}", file=sys.stderr)
            return EXIT_SERVICE
        if not isinstance(nb, dict) or nb.get("nbformat") != 4:
            print(f"interp: {args.session} is not an nbformat v4 notebook", file=sys.stderr)
            return EXIT_SERVICE
    elif args.session.endswith(".ipynb") or "/" in args.session:
        # A path, not a session id (those have neither): said as such, not as a session.
        print(f"interp: no notebook file {args.session}", file=sys.stderr)
        return EXIT_SERVICE
    else:
        try:
            nb = _session_notebook(args, progress)
        except ClientError as exc:
            return _service_error(exc)
    progress(f"rendering {len(nb.get('cells', []))} cells to HTML...")
    html = notebook_to_html(nb)
    _write_text(args.output, html)
    if args.output not in (None, "-"):
        progress(f"wrote {args.output} ({len(html) // 1024} KiB)")
    return EXIT_OK


# ------------------------------------------------------------------------------ replay


def _read_notebook(path: str, files: str | None) -> dict[str, Any] | None:
    """The nbformat v4 notebook in ``path``, checked before any service is asked (and
    ``files``, a directory to upload, if given); None once a line has said what is wrong."""
    from interpreter.cells import notebook_problem

    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"interp: cannot read notebook {path}: {exc}", file=sys.stderr)
        return None
    problem = notebook_problem(nb)
    if problem is not None:
        print(f"interp: {path} is not a valid nbformat v4 notebook: {problem}", file=sys.stderr)
        return None
    if files and not Path(files).is_dir():
        print(f"interp: --files {files}: not a directory", file=sys.stderr)
        return None
    result: dict[str, Any] = nb
    return result


def _prepare_inputs(
    client: Client, session: Session, args: argparse.Namespace, progress: Progress
) -> None:
    """Put the notebook's input files into ``session``'s workspace: ``--from-session``'s
    files, then ``--files``' (which win)."""
    from interpreter.replay.inputs import copy_workspace, upload_directory

    if args.from_session:
        copied = copy_workspace(client, args.from_session, session)
        progress(f"copied {len(copied)} files from session {args.from_session}")
    if args.files:
        written = upload_directory(session, Path(args.files))
        progress(f"uploaded {len(written)} files from {args.files}")


def cmd_replay(args: argparse.Namespace) -> int:
    """``interp replay NOTEBOOK``: re-run it in a fresh session and compare outputs."""
    from interpreter.replay import print_cell, print_summary, replay_notebook

    # Checked here, before an embedded service starts (replay_notebook checks as well).
    nb = _read_notebook(args.notebook, args.files)
    if nb is None:
        return EXIT_SERVICE
    progress = Progress(args.quiet or args.json)
    url = _explicit_url(args)
    # Ctrl-C and SIGTERM end the replay as they end `interp run`: its session (which the
    # replay made) is deleted on the way out, the code it ran stopped with it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        if url is None:
            progress("starting an embedded service...")
            with args.embed() as (embedded_url, embedded_key):
                return _replay_against(
                    args,
                    nb,
                    embedded_url,
                    embedded_key,
                    progress,
                    replay_notebook,
                    print_cell,
                    print_summary,
                )
        return _replay_against(
            args, nb, url, args.api_key, progress, replay_notebook, print_cell, print_summary
        )
    except ClientError as exc:
        return _service_error(exc)
    except (KeyboardInterrupt, Terminated) as stop:
        print("interp: replay stopped; its session was deleted", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED


def _replay_against(
    args: argparse.Namespace,
    nb: dict[str, Any],
    url: str,
    api_key: str | None,
    progress: Progress,
    replay_notebook: Any,
    print_cell: Any,
    print_summary: Any,
) -> int:
    with Client(url, api_key=api_key, timeout=60) as client:

        def prepare(session: Session) -> None:
            _prepare_inputs(client, session, args, progress)

        progress(f"replaying {args.notebook} against {url}...")
        report = replay_notebook(
            client,
            nb,
            stop_on_mismatch=args.stop_on_mismatch,
            image_tolerance=args.image_tolerance,
            on_cell=None if args.json else print_cell,
            name=str(args.notebook),
            prepare=prepare,
            on_held=lambda cell, approval: say_held(approval, f"cell {cell.index} "),
        )
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print_summary(report)
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_rebuild(args: argparse.Namespace) -> int:
    """``interp rebuild NOTEBOOK``: bring a notebook's state back in a session (a new one,
    kept, unless ``--session``) by re-running its good cells; the session is left running
    for more work. Exit 1 if a re-run cell did not end as recorded."""
    nb = _read_notebook(args.notebook, args.files)
    if nb is None:
        return EXIT_SERVICE
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_terminated)
    progress = Progress(args.quiet or args.json)
    with _client(args) as client:
        session: Session | None = None
        created = False
        done = False
        try:
            session, created = _session_for(client, args.session, progress)
            _prepare_inputs(client, session, args, progress)
            progress(f"re-running the cells of {args.notebook}...")
            info = session.rebuild(nb)
            done = True
        except ClientError as exc:
            return _service_error(exc)
        except (KeyboardInterrupt, Terminated) as stop:
            if session is not None and not created:
                # The session is not this command's to end, and the service's rebuild runs
                # on in it (an interrupt would only move it to its next cell): say so.
                print(
                    f"interp: stopped waiting; the service goes on re-running the notebook's "
                    f"cells in session {session.id}",
                    file=sys.stderr,
                )
            return EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED
        finally:
            # A new session that did not rebuild is of no use to anyone: not left behind.
            if session is not None and created and not done:
                try:
                    session.close()
                except ClientError as exc:
                    print(f"interp: could not delete session: {exc}", file=sys.stderr)
    report = info.rebuild
    if args.json:
        print(info.model_dump_json(indent=2))
    else:
        summary = report.summary() if report is not None else "no cells ran."
        # The summary quotes the cells' first lines: an agent's text.
        print(f"Rebuilt from {args.notebook}: {visible(summary)}")
        print(f"session: {info.id}")
    return EXIT_FAILED if report is not None and report.failed else EXIT_OK


# ------------------------------------------------------------------------- tools / mcp


def cmd_tools(args: argparse.Namespace) -> int:
    """``interp tools --format openai|openai-responses|anthropic``: print tool definitions
    as JSON. With a service (``--url`` or ``$INTERP_URL``), ``run_code`` names its kernel's
    main packages."""
    from interpreter.tools import tool_definitions

    packages: dict[str, str] | None = None
    if _explicit_url(args):
        try:
            with _client(args) as client:
                packages = dict(client.info().packages)
        except ClientError as exc:
            return _service_error(exc)
    print(json.dumps(tool_definitions(args.format, packages=packages), indent=2))
    return EXIT_OK


# ------------------------------------------------------------------------ registration


def _quiet_http_log(
    func: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """Wrap a command so per-request log lines (the SDK's, and an embedded service's access
    log) only show with ``interp -v``."""

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        if not getattr(args, "verbose", False):
            for name in ("httpx", "interpreter.access", "interpreter.executions"):
                logging.getLogger(name).setLevel(logging.WARNING)
        return func(args)

    return wrapper


#: Starts a service in this process for commands given no URL: a context manager that
#: yields its (URL, API key). Supplied by ``interp``'s entry point, the layer that may
#: import the server; these commands reach a service only through the SDK.
Embed = Callable[[], AbstractContextManager[tuple[str, str | None]]]


def _add_input_options(parser: argparse.ArgumentParser, workspace: str) -> None:
    """``--files`` and ``--from-session``: the input files a notebook reads, put into
    ``workspace`` first (:func:`_prepare_inputs`)."""
    parser.add_argument(
        "--files",
        metavar="DIR",
        help=f"Upload every file under DIR into {workspace} first (same relative paths), "
        "for notebooks that read input files.",
    )
    parser.add_argument(
        "--from-session",
        metavar="ID",
        help=f"Copy the workspace files of session ID (e.g. the one that recorded the "
        f"notebook) into {workspace} first; with --files, DIR's files win.",
    )


def add_commands(subparsers: Any, embed: Embed) -> None:
    """Register the client commands on the ``interp`` parser's subparsers.

    Each sets ``func``, a callable taking the parsed arguments and returning the exit
    status, and ``embed`` (:data:`Embed`).
    """
    parent = _connection_parent()

    run = subparsers.add_parser(
        "run",
        parents=[parent],
        help="Run a file or code in a session, streaming its output.",
        description="Run Python code in a session (a new one unless --session) and stream "
        "its output. Exit status 1 if the code fails.",
    )
    run.add_argument("file", nargs="?", help="Python file to run ('-' for stdin).")
    run.add_argument("-c", "--code", help="Code to run instead of a file.")
    run.add_argument("--session", help="Run in this existing session (state is kept).")
    run.add_argument("--timeout", type=float, default=None, help="Time limit in seconds.")
    run.add_argument(
        "--keep", action="store_true", help="Keep the new session afterwards and print its id."
    )
    run.add_argument("--images", metavar="DIR", help="Save images the code shows into DIR.")
    run.set_defaults(func=_quiet_http_log(cmd_run))

    sessions = subparsers.add_parser("sessions", parents=[parent], help="List sessions.")
    sessions.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
    sessions.add_argument(
        "--state",
        choices=["open", "closed", "all"],
        default="all",
        help="Which sessions: open (not closed), closed, or all (default).",
    )
    sessions.set_defaults(func=_quiet_http_log(cmd_sessions))

    notebook = subparsers.add_parser(
        "notebook", parents=[parent], help="Export a session's notebook (.ipynb)."
    )
    notebook.add_argument("session", help="Session id.")
    notebook.add_argument("-o", "--output", help="Output file (default: stdout).")
    notebook.set_defaults(func=_quiet_http_log(cmd_notebook))

    html = subparsers.add_parser(
        "html",
        parents=[parent],
        help="Render a session's notebook (or an .ipynb file) as HTML with its plots.",
    )
    html.add_argument(
        "session", help="Session id, or the path of a notebook file (rendered without a service)."
    )
    html.add_argument("-o", "--output", help="Output file (default: stdout).")
    html.set_defaults(func=_quiet_http_log(cmd_html))

    embedding = _connection_parent(url_help=EMBEDDING_URL_HELP)
    replay = subparsers.add_parser(
        "replay",
        parents=[embedding],
        help="Re-run a notebook in a fresh session and check its outputs match.",
        description="Run the notebook's code cells in a fresh session, in order, and report "
        "per cell whether the outputs match the recorded ones (addresses, times "
        "and ids masked; images compared perceptually). A cell that raised an error "
        "is re-run (the same error again is a match); cells recorded as stopped "
        "(timeout, interrupted, kernel_died) are reported as such and not re-run, and "
        "cells never executed are skipped. "
        "Exit status 0 only if every re-run cell matches. Without "
        "--server/--url/$INTERP_URL an embedded service is started.",
    )
    replay.add_argument("notebook", help="The .ipynb file.")
    replay.add_argument("--server", dest="url", help="Service URL (same as --url).")
    replay.add_argument(
        "--stop-on-mismatch",
        action="store_true",
        help="Stop at the first cell that does not match.",
    )
    replay.add_argument("--json", action="store_true", help="Print the report as JSON.")
    _add_input_options(replay, "the replay's workspace")
    replay.add_argument(
        "--image-tolerance",
        type=float,
        default=0.02,
        help="Largest mean pixel difference (0..1) for images to match.",
    )
    replay.set_defaults(func=_quiet_http_log(cmd_replay), embed=embed)

    rebuild = subparsers.add_parser(
        "rebuild",
        parents=[parent],
        help="Bring back a notebook's state in a session, to go on working in it.",
        description="Re-run the notebook's code cells, in order, in a new session "
        "(kept afterwards) or in --session's, on top of its state, and print the session "
        "id. A cell that raised an error is re-run too (raising it again is as recorded); "
        "cells recorded as stopped (timeout, interrupted, kernel died) are skipped, as are "
        "cells never executed. Exit status 1 if a re-run cell did not "
        "end as recorded (the session is kept: see the report), 2 if the notebook or the "
        "service refused.",
    )
    rebuild.add_argument("notebook", help="The .ipynb file.")
    rebuild.add_argument("--session", help="Rebuild in this existing session instead.")
    rebuild.add_argument("--json", action="store_true", help="Print the session as JSON.")
    _add_input_options(rebuild, "the workspace")
    rebuild.set_defaults(func=_quiet_http_log(cmd_rebuild))

    tools = subparsers.add_parser(
        "tools",
        parents=[
            _connection_parent(
                url_help=f"Service URL whose kernel's packages run_code names (default "
                f"${URL_ENV}; without either, none are named)."
            )
        ],
        help="Print tool definitions for function calling (with --url, naming the kernel's "
        "packages).",
    )
    tools.add_argument(
        "--format",
        choices=["openai", "openai-responses", "anthropic"],
        default="openai",
        help="openai: Chat Completions tools; openai-responses: the Responses API's; "
        "anthropic: the Messages API's.",
    )
    tools.set_defaults(func=_quiet_http_log(cmd_tools))

    add_mcp_command(subparsers, embedding, embed, _quiet_http_log)
    # Approvals need an operator key, never the agent's default one.
    add_approvals_command(subparsers, _connection_parent(APPROVALS_KEY_HELP), _quiet_http_log)
