"""Wire models of HTTP API v1, shared by the server, the SDK and the OpenAPI document.

Request models are strict: unknown fields, wrong types (a bool where a number is wanted)
and non-finite numbers are refused. Response models are plain and permissive.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

SessionStatus = Literal["starting", "idle", "busy", "dead", "closed"]
ExecutionStatus = Literal[
    "queued",
    "pending_approval",
    "running",
    "ok",
    "error",
    "timeout",
    "interrupted",
    "kernel_died",
    "cancelled",
    "denied",
    "unknown",
]
TERMINAL_STATUSES: frozenset[str] = frozenset(
    {"ok", "error", "timeout", "interrupted", "kernel_died", "cancelled", "denied", "unknown"}
)


def _check_text(value: str) -> str:
    """Refuse NUL bytes and lone surrogates (they cannot be stored or encoded)."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid Unicode (no lone surrogates)") from exc
    return value


def check_json_text(value: Any, where: str = "") -> Any:
    """Refuse a lone surrogate anywhere in a JSON value (keys of objects too); return the value.

    JSON's ``\\ud800`` escapes decode to strings that UTF-8 cannot encode: such a value
    would be stored, then fail every answer that serialises it. For free-form fields
    (``metadata``); a field validator can call it as it is.

    Raises:
        ValueError: naming where (``a.b[2]``) the bad string is.
    """
    if isinstance(value, str):
        if not _encodable(value):
            raise ValueError(f"{where or 'value'}: must be valid Unicode (no lone surrogates)")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and not _encodable(key):
                raise ValueError(
                    f"a key in {where or 'the object'} must be valid Unicode (no lone surrogates)"
                )
            check_json_text(item, f"{where}.{str(key)[:40]}" if where else str(key)[:40])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json_text(item, f"{where}[{index}]")
    return value


def replace_bad_text(value: Any) -> Any:
    """``value`` with every lone surrogate (in strings and object keys, at any depth)
    replaced by U+FFFD, so that a value stored before it was refused can still be served."""
    if isinstance(value, str):
        return value if _encodable(value) else _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {replace_bad_text(key): replace_bad_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [replace_bad_text(item) for item in value]
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


# ---------------------------------------------------------------------------- requests


#: Fewest cores a session may have: under 0.01 the engine refuses the container, and
#: under about 0.05 a kernel takes longer than a minute to start.
MIN_CPUS = 0.05


class Limits(_Request):
    """Per-session resource limits; each is capped by the server's maxima."""

    memory_mb: int | None = Field(None, ge=64, description="Memory (and memory+swap) in MiB.")
    cpus: float | None = Field(
        None,
        ge=MIN_CPUS,
        description=f"CPU quota in cores (at least {MIN_CPUS}: a kernel needs CPU to start).",
    )
    pids: int | None = Field(None, ge=16, description="Processes and threads at most.")
    disk_mb: int | None = Field(
        None, ge=8, description="Workspace disk quota in MiB (its own filesystem; ENOSPC past it)."
    )


class CreateSessionRequest(_Request):
    """Body of ``POST /v1/sessions`` (all optional)."""

    idle_timeout_s: float | None = Field(
        None, ge=0, le=7 * 86400, description="Cull after this idle time; 0 disables culling."
    )
    limits: Limits | None = None
    env: dict[str, str] = Field(default_factory=dict, description="Extra kernel environment.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form labels.")
    from_session: str | None = Field(
        None, min_length=1, max_length=100, description="Rebuild from this session's notebook."
    )
    from_notebook: dict[str, Any] | None = Field(
        None, description="Rebuild from this nbformat v4 notebook (JSON)."
    )
    image: str | None = Field(
        None,
        min_length=1,
        max_length=300,
        description="Docker backend: the kernel image, one of the server's default image and "
        "its allowlist (INTERP_DOCKER_IMAGES); another name is 422.",
    )

    @field_validator("metadata")
    @classmethod
    def _check_metadata(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        return dict(check_json_text(metadata))

    @field_validator("env")
    @classmethod
    def _check_env(cls, env: dict[str, str]) -> dict[str, str]:
        if len(env) > 64:
            raise ValueError("at most 64 variables")
        total = 0
        for key, value in env.items():
            _check_text(key)
            _check_text(value)
            size = len(key.encode()) + len(value.encode())
            total += size
            if len(key) > 256 or size > MAX_ENV_ENTRY_BYTES:
                raise ValueError(
                    f"variable {key[:40]!r} is too long: at most 256 characters of name and "
                    f"{MAX_ENV_ENTRY_BYTES} bytes in all (put large data in a workspace file)"
                )
            if total > MAX_ENV_BYTES:
                raise ValueError(f"the variables exceed {MAX_ENV_BYTES} bytes in all")
            if not _ENV_NAME.fullmatch(key):
                raise ValueError(
                    f"invalid variable name {key[:60]!r}: letters, digits and '_', not "
                    "starting with a digit"
                )
            why = reserved_env(key)
            if why is not None:
                raise ValueError(f"variable {key!r} is reserved: {why}")
        return env


#: A variable's name as a shell and ``os.environ`` take it (a newline or a space in one
#: split ``env`` output and Docker's env file alike).
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: One NAME=value entry, and all of them: well below Linux's 128 KiB per string for exec.
MAX_ENV_ENTRY_BYTES = 32 << 10
MAX_ENV_BYTES = 256 << 10

#: Why a variable is not the client's to set: the service sets it, or it names code,
#: a command or a library that Python, IPython or a package in the image runs, imports
#: or loads on its own, so that innocent-looking code (``breakpoint()``, ``import
#: antigravity``, ``help(x)``, a kernel restart) would run what no policy read.
_SERVICE_SETS = "the service sets it for every kernel"
_PYTHON_IMPORTS = "it decides where Python finds the code it imports (the service sets it)"
_ENV_NAMES_CODE = {
    "PATH": "the service sets where commands are found",
    "HOME": "the service sets the kernel's home directory",
    "PYTHONPATH": _PYTHON_IMPORTS,
    "PYTHONHOME": _PYTHON_IMPORTS,
    "PYTHONPLATLIBDIR": _PYTHON_IMPORTS,
    "PYTHONUSERBASE": _PYTHON_IMPORTS,
    "PYTHONNOUSERSITE": _PYTHON_IMPORTS,
    "PYTHONSAFEPATH": _PYTHON_IMPORTS,
    "PYTHONPYCACHEPREFIX": "Python would load compiled code from the directory it names",
    "PYTHONSTARTUP": "the kernel runs the file it names when it starts",
    "PYTHONBREAKPOINT": "breakpoint() calls the function it names (os.system runs a command)",
    "PYTHONWARNINGS": "Python imports a module it names when the kernel starts",
    "_PYTHON_SYSCONFIGDATA_NAME": "sysconfig imports the module it names",
    "PYZMQ_BACKEND": "pyzmq imports the module it names when the kernel starts",
    "LOKY_PICKLER": "joblib imports the module it names",
    "IPYTHONDIR": "it names where IPython reads the code it runs at start",
    "MPLBACKEND": "matplotlib imports the module it names (the service sets it)",
    "MPLCONFIGDIR": "it names where matplotlib reads matplotlibrc, which names programs it runs",
    "MATPLOTLIBRC": "it names the matplotlibrc matplotlib reads, which names programs it runs",
    "XDG_CONFIG_HOME": "it names where matplotlib and others read settings that name "
    "programs they run",
    "BROWSER": "webbrowser (import antigravity, a plot shown in a browser) runs the command "
    "it names",
    "PAGER": "pydoc's pager (help()) runs the command it names",
    "MANPAGER": "pydoc's pager (help()) runs the command it names",
    "LESSOPEN": "the pager less runs the command it names",
    "LESSCLOSE": "the pager less runs the command it names",
    "EDITOR": "editing tools run the command it names",
    "VISUAL": "editing tools run the command it names",
    "SHELL": "IPython runs shell commands with the program it names",
    "BASH_ENV": "a shell runs the script it names when it starts",
    "ENV": "an interactive shell runs the script it names when it starts",
    "CC": "a build (sympy's autowrap, an extension) runs the compiler it names",
    "CXX": "a build (sympy's autowrap, an extension) runs the compiler it names",
    "LDSHARED": "a build (sympy's autowrap, an extension) runs the linker it names",
    "X12PATH": "statsmodels runs the X-12/X-13ARIMA program it names",
    "X13PATH": "statsmodels runs the X-12/X-13ARIMA program it names",
    "OPENSSL_CONF": "OpenSSL loads the modules its file names when Python starts",
    "OPENSSL_MODULES": "OpenSSL loads modules from the directory it names",
    "OPENSSL_ENGINES": "OpenSSL loads modules from the directory it names",
    "GCONV_PATH": "the C library loads conversion modules from the directory it names",
}
#: Prefixes of reserved names, and why.
_RESERVED_PREFIXES = {
    "JPY_": _SERVICE_SETS,
    "INTERP_": _SERVICE_SETS,
    "JUPYTER_": "it configures the service's Jupyter set-up",
    "LD_": "the dynamic loader loads the libraries it names into every program",
}


def reserved_env(name: str) -> str | None:
    """Why the kernel environment variable ``name`` is not the client's to set (a
    session's ``env``, E2B's ``envs``), or None when it may be set."""
    if name in _ENV_NAMES_CODE:
        return _ENV_NAMES_CODE[name]
    upper = name.upper()
    return next((why for p, why in _RESERVED_PREFIXES.items() if upper.startswith(p)), None)


class ExecuteRequest(_Request):
    """Body of ``POST /v1/sessions/{id}/execute``."""

    code: str = Field(..., max_length=1_000_000, description="Python source to run.")
    # No upper bound here: the server's maximum (max_timeout_s, GET /v1/info) is the only
    # one, so a refusal names it (a bound of 86400 here was told first, then the server's).
    timeout_s: float | None = Field(
        None,
        gt=0,
        description="Wall-clock limit in seconds, at most the server's max_timeout_s "
        "(GET /v1/info); on expiry interrupt, then restart.",
    )
    on_disconnect: Literal["continue", "interrupt"] = Field(
        "continue",
        description="When the client goes away before the result: keep running (its result "
        "stays retrievable by id) or interrupt this execution.",
    )
    if_busy: Literal["queue", "reject"] = Field(
        "queue",
        description="When another execution runs or waits: queue behind it, or refuse at once "
        "(409 session_running, naming the running execution and its age).",
    )

    @field_validator("code")
    @classmethod
    def _check_code(cls, code: str) -> str:
        return _check_text(code)


class InterruptRequest(_Request):
    """Body of ``POST /v1/sessions/{id}/interrupt``: none, or ``{}``. What to interrupt is
    chosen by the query parameters ``execution_id`` and ``generation``."""


class RestartRequest(_Request):
    """Body of ``POST /v1/sessions/{id}/restart`` (optional)."""

    recover: bool = Field(
        False, description="After the restart, rebuild state by replaying the good cells."
    )
    keep_queued: bool | None = Field(
        None,
        description=(
            "Run the cells queued behind the restart on the fresh kernel. Default: only with "
            "recover (their state is rebuilt first); otherwise they are cancelled (status "
            "cancelled, state_lost true), since they were written against the lost state."
        ),
    )


class RebuildRequest(_Request):
    """Body of ``POST /v1/sessions/{id}/rebuild``."""

    notebook: dict[str, Any] = Field(
        ...,
        description="An nbformat v4 notebook (JSON) whose good cells are re-run in this "
        "session, in order, on top of its current state (as from_notebook does at creation).",
    )


# --------------------------------------------------------------------------- responses


class KernelInfo(BaseModel):
    language: str = "python"
    version: str = ""


class RebuildCell(BaseModel):
    """One cell of a rebuild's source that did not simply re-run as recorded."""

    index: int = Field(..., description="Its position in the source notebook (all cells).")
    execution_id: str | None = Field(None, description="The execution that recorded it.")
    execution_count: int | None = Field(
        None, description="Its In [n] as recorded (numbers repeat after a restart)."
    )
    recorded_status: str = "ok"
    status: str | None = Field(
        None, description="How its re-run ended; None when it was not re-run."
    )
    rerun_execution_id: str | None = Field(
        None, description="The re-run's execution in the rebuilt session."
    )
    first_line: str = Field(
        "", description="The first line of its code that is not blank (at most 60 characters)."
    )
    error: str | None = Field(
        None,
        description="How a failed re-run ended: its error's 'ename: evalue' (at most 200 "
        "characters), else its status and reason.",
    )

    def label(self) -> str:
        """How a summary names it: see :func:`cell_label`."""
        return cell_label(self.index, self.execution_count, self.first_line)


#: The most characters of a cell's first line that a rebuild's words quote.
FIRST_LINE_CHARS = 60


def first_line(source: str) -> str:
    """The first line of ``source`` that is not blank, cut to :data:`FIRST_LINE_CHARS`."""
    line = next((ln.strip() for ln in source.splitlines() if ln.strip()), "")
    return line if len(line) <= FIRST_LINE_CHARS else line[: FIRST_LINE_CHARS - 3] + "..."


def cell_label(index: int, execution_count: int | None, line: str) -> str:
    """A cell as a rebuild's summary and notebook note name it: ``In [2] `1/0` ``.

    By its ``In [n]`` as recorded, the number the tools and JupyterLab showed for it (the
    index among a notebook's cells is shown by neither), with its first line of code, as
    numbers repeat after a restart; ``cell #i`` (its index) when it has no number.
    """
    name = f"In [{execution_count}]" if execution_count is not None else f"cell #{index}"
    quoted = line.replace("`", "'")
    return f"{name} `{quoted}`" if line else name


class RebuildReport(BaseModel):
    """How a session's state was rebuilt from a notebook. Its lists hold cells' indexes in
    the source notebook (markdown cells count); ``cells`` names them by ``In [n]`` and code
    too, as the summary and the notebook note do."""

    source: str = Field(..., description="'session:<id>' or 'notebook'.")
    cells_total: int = 0
    cells_ran: int = 0
    cells_skipped: int = 0
    failed: list[int] = Field(
        default_factory=list,
        description="Source notebook indexes of re-run cells that did not end as recorded "
        "(a recorded error raised again is not a failure: see errors_again).",
    )
    errors_again: list[int] = Field(
        default_factory=list,
        description="Re-run cells that raised their recorded error again, as expected: "
        "what they did before the error is restored.",
    )
    not_rerun: list[int] = Field(
        default_factory=list,
        description="Cells that ran but were stopped (timeout, interrupted, kernel_died, "
        "unknown) and were not re-run: names they defined may be missing.",
    )
    cells: list[RebuildCell] = Field(
        default_factory=list,
        description="The cells of failed, errors_again, not_rerun and (the first 20 of) "
        "not_run, with execution ids.",
    )
    stopped: str | None = Field(
        None,
        description="Why the re-runs stopped before the last cell, when they did: the "
        "kernel was replaced while one ran (its reason: 'oom_killed', 'exit:1', a timeout's "
        "restart), so the state they had rebuilt is gone and the cells after were not run; "
        "or the broker stopped: 'broker_shutdown' (it was shut down, and said so to the "
        "rebuild's caller with 503 shutting_down) or 'broker_restarted' (it was killed, and "
        "the next broker wrote this report); the cells re-run before are in the kernel's "
        "state if the kernel outlived the broker (the next cell's state_lost says if not).",
    )
    stopped_at: int | None = Field(
        None,
        description="The source notebook index of the cell that ran when the re-runs "
        "stopped (its run replaced the kernel, or its broker stopped while it ran, so its "
        "outcome is unknown); None when the broker stopped between two cells.",
    )
    not_run: list[int] = Field(
        default_factory=list,
        description="Cells that were to be re-run but were not, because the re-runs "
        "stopped first (see stopped).",
    )
    skipped_because: dict[str, int] = Field(
        default_factory=dict,
        description="The skipped cells counted by why they were not re-run: 'state_lost' "
        "(they ran before a restart that cleared the state), 'never_ran', "
        "'recorded_failure' (stopped when recorded: not_rerun), 'own_rerun' (an earlier "
        "recovery re-ran them).",
    )

    def summary(self) -> str:
        """What happened, in a few sentences for a person or a model (the tools say it)."""
        named = {c.index: c for c in self.cells}

        def called(i: int) -> str:
            return named[i].label() if i in named else f"cell #{i}"

        def listed(indexes: list[int], with_ids: bool = False) -> str:
            words = []
            for i in indexes[:20]:
                rerun = named[i].rerun_execution_id if i in named else None
                words.append(
                    f"{called(i)} (execution {rerun})" if with_ids and rerun else called(i)
                )
            more = f" and {len(indexes) - 20} more" if len(indexes) > 20 else ""
            return f"{', '.join(words)}{more}"

        text = f"{self.cells_ran} of {self.cells_total} cells re-ran"
        if self.stopped in BROKER_STOPS:
            text += f"; the re-runs STOPPED {self.where_stopped(called)}"
        elif self.stopped is not None:
            at = called(self.stopped_at) if self.stopped_at is not None else "a cell"
            left = self.cells_total - self.cells_skipped - self.cells_ran
            text += (
                f"; the re-runs STOPPED at {at}: the kernel was replaced while it ran "
                f"({self.stopped}), so nothing the re-run cells rebuilt is left in the "
                f"session, and {left} cell{'' if left == 1 else 's'} after it did not run"
            )
        if self.errors_again:
            text += (
                f"; {listed(self.errors_again)} raised the error recorded for "
                f"{'it' if len(self.errors_again) == 1 else 'them'} again, as expected: "
                "what ran before the error is restored"
            )
        if self.failed:
            why = [
                f"{called(i)} failed"
                + (
                    f" (execution {named[i].rerun_execution_id})"
                    if i in named and named[i].rerun_execution_id
                    else ""
                )
                + (f": {named[i].error}" if i in named and named[i].error else "")
                for i in self.failed[:20]
            ]
            more = f" and {len(self.failed) - 20} more failed" if len(self.failed) > 20 else ""
            text += (
                "; the state is NOT fully restored (what the failed cells define, and what "
                f"later cells built on it, may be missing): {'; '.join(why)}{more}"
            )
        if self.not_rerun:
            stopped = ", ".join(
                f"{called(i)} ({named[i].recorded_status})" if i in named else called(i)
                for i in self.not_rerun[:20]
            )
            text += (
                f"; not re-run: {stopped}, stopped before the end when recorded: names "
                "defined there may be missing"
            )
        other = {k: v for k, v in self.skipped_because.items() if k != "recorded_failure" and v}
        if other:
            said = ", ".join(
                f"{count} {_SKIPPED_WHY.get(why, why).format(s='' if count == 1 else 's')}"
                for why, count in sorted(other.items())
            )
            text += f"; skipped: {said}"
        return text + ("." if self.failed else "; none failed.")

    def where_stopped(self, called: Callable[[int], str] | None = None) -> str:
        """Where and why re-runs stopped by their broker stopped (:data:`BROKER_STOPS`),
        in words: ``while In [5] `x = 1` re-ran: the broker shut down ...``; cells are
        named by ``called`` (default: by index)."""
        name = called or (lambda i: f"cell #{i}")
        how = (
            "the broker shut down"
            if self.stopped == "broker_shutdown"
            else "the broker was killed or crashed"
        )
        if self.stopped_at is not None:
            status = next((c.status for c in self.cells if c.index == self.stopped_at), None)
            outcome = "interrupted" if status == "interrupted" else "its outcome is unknown"
            where = f"while {name(self.stopped_at)} re-ran ({outcome})"
        elif self.cells_ran:
            where = "between two cells"
        else:
            where = "before any cell re-ran"
        left = len(self.not_run)
        listed = ", ".join(name(i) for i in self.not_run[:20])
        more = f" and {left - 20} more" if left > 20 else ""
        after = " after it" if self.stopped_at is not None else ""
        text = f"{where}: {how} ({self.stopped}), and " + (
            f"{left} cell{'' if left == 1 else 's'}{after} {'was' if left == 1 else 'were'} "
            f"not re-run: {listed}{more}"
            if left
            else "no cell was left to re-run"
        )
        if self.cells_ran:
            text += (
                ". What the cells re-run before did is in the session only if its kernel "
                "outlived the broker (the next cell's state_lost says if not)"
            )
        return text + "; for all of it, rebuild again in a restarted or new session"


#: A rebuild's ``stopped`` when its broker stopped while it re-ran cells: shut down, or
#: killed (written by the next broker).
BROKER_STOPS = frozenset({"broker_shutdown", "broker_restarted"})

#: How the summary says why cells were skipped (``{s}``: the plural's ending).
_SKIPPED_WHY = {
    "state_lost": "cell{s} from before a restart that cleared the state",
    "never_ran": "cell{s} never executed",
    "own_rerun": "re-run cell{s} of an earlier recovery (the cells they re-ran are re-run)",
}


class Session(BaseModel):
    id: str
    status: SessionStatus
    backend: str
    created_at: datetime
    last_activity_at: datetime
    execution_count: int = 0
    kernel: KernelInfo = Field(default_factory=KernelInfo)
    metadata: dict[str, Any] = Field(default_factory=dict)
    idle_timeout_s: float | None = None
    limits: dict[str, Any] = Field(default_factory=dict)
    rebuild: RebuildReport | None = None
    generation: int = Field(
        0,
        description="Kernel incarnation: 1 for the first kernel, +1 at every restart. "
        "Give it as ?generation= to interrupt, restart or delete only that kernel.",
    )
    closed_reason: str | None = Field(
        None,
        description="Why a closed or dead session stopped: deleted, idle_timeout, "
        "max_lifetime, restart_limit, start_failed, broker_restarted, ...",
    )
    closed_at: datetime | None = Field(
        None,
        description="When a closed session was closed. With a retention "
        "(INTERP_RETAIN_CLOSED_DAYS), its record and files are removed that long after.",
    )
    image: str | None = Field(None, description="The kernel image (docker backend).")
    packages: dict[str, str] = Field(
        default_factory=dict,
        description="Python packages the kernel can import, with their versions (also in the "
        "notebook's metadata.interp.packages).",
    )

    @field_validator("metadata")
    @classmethod
    def _servable_metadata(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        # Refused on create since; a record stored earlier is served with U+FFFD.
        return dict(replace_bad_text(metadata))


class SessionList(BaseModel):
    sessions: list[Session]
    #: With ``limit``: the ``after`` of the next page, None when there is none.
    next: str | None = None


class ArtifactRef(BaseModel):
    id: str
    mime: str
    size: int
    url: str


class StreamOffsets(BaseModel):
    """Where an output came among the printed text (see ``Output.after``)."""

    stdout: int = Field(0, description="Characters of the execution's stdout before it.")
    stderr: int = Field(0, description="Characters of the execution's stderr before it.")


class Output(BaseModel):
    type: Literal["execute_result", "display_data"]
    data: dict[str, Any] = Field(default_factory=dict)
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    display_id: str | None = None
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="The output's metadata as the kernel sent it, by MIME type (e.g. a "
        "retina PNG's width and height).",
    )
    after: StreamOffsets | None = Field(
        None,
        description="How much of the execution's stdout and stderr (as in the finished "
        "Execution) was printed before this output, so that a reader can put prints and "
        "outputs in the order they came; null while running, and when stdout or stderr "
        "was cut.",
    )


class ErrorInfo(BaseModel):
    ename: str
    evalue: str
    traceback: list[str] = Field(default_factory=list)


class ApprovalOutcome(BaseModel):
    """How a held execution was decided: by whom (a key's name, or ``service`` for an
    expiry or a withdrawal), when and why.

    ``withdrawn``: nobody decided; the execution ended first, ``cancelled`` (an interrupt,
    a restart, its session's close or the broker's stop), and ``comment`` is its reason."""

    decision: Literal["approved", "denied", "expired", "withdrawn"]
    decided_by: str
    decided_at: datetime
    comment: str | None = None


class PolicyResult(BaseModel):
    """The policy stage's decision on an execution, and what it was based on."""

    decision: Literal["allow", "deny", "approve"] = Field(
        ..., description="'approve': held for a person's decision (see approval)."
    )
    policy: str = Field(..., description="The policy that decided (by its name in the file).")
    rule: str | None = Field(None, description="The rule that matched; null: the default.")
    message: str = Field("", description="The rule's message, for the agent.")
    facts: dict[str, Any] = Field(
        default_factory=dict, description="What the analyser found in the code."
    )
    approval_id: str | None = None
    approval: ApprovalOutcome | None = None


class Approval(BaseModel):
    """An execution held for approval (``GET /v1/approvals``)."""

    id: str
    status: Literal["pending", "approved", "denied", "expired", "withdrawn"] = Field(
        ...,
        description="'withdrawn': the execution was cancelled before anyone decided "
        "(the outcome's comment says why); it was not run and can no longer be decided.",
    )
    session_id: str
    execution_id: str
    key: str = Field(..., description="The name of the key that submitted it.")
    code: str
    policy: str
    rule: str | None = None
    message: str = ""
    facts: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    expires_at: datetime
    outcome: ApprovalOutcome | None = None


class ApprovalList(BaseModel):
    approvals: list[Approval]


class DecideRequest(_Request):
    """Body of ``POST /v1/approvals/{id}/approve`` and ``.../deny`` (optional)."""

    comment: str | None = Field(None, max_length=2000, description="Why, for the record.")

    @field_validator("comment")
    @classmethod
    def _check_comment(cls, comment: str | None) -> str | None:
        return None if comment is None else _check_text(comment)


class Execution(BaseModel):
    id: str
    session_id: str
    execution_count: int | None = None
    status: ExecutionStatus
    code: str = ""
    stdout: str = ""
    stderr: str = ""
    outputs: list[Output] = Field(default_factory=list)
    error: ErrorInfo | None = None
    started_at: datetime | None = None
    duration_ms: float | None = None
    truncated: bool = False
    state_lost: bool = False
    reason: str | None = Field(
        None, description="Why it ended abnormally: timeout, oom_killed, exit:<code>, ..."
    )
    artifacts: list[ArtifactRef] = Field(
        default_factory=list, description="Full-text artifacts of cut stdout/stderr."
    )
    generation: int | None = Field(
        None, description="The kernel generation that ran it (see Session.generation)."
    )
    policy: PolicyResult | None = Field(
        None, description="The policy decision, when a policy file is in use."
    )


class ServiceLimits(BaseModel):
    memory_mb: int | None = None
    cpus: float | None = None
    pids: int | None = None
    disk_mb: int | None = None


class ServiceInfo(BaseModel):
    """Body of ``GET /v1/info``: what code run by this service can expect."""

    version: str
    backend: str = Field(..., description="'docker' or 'local'.")
    isolated: bool = Field(..., description="Each session runs in its own container.")
    network: bool = Field(..., description="Kernels can reach the network.")
    default_timeout_s: float
    max_timeout_s: float
    default_limits: ServiceLimits | None = Field(
        None, description="Per-session limits when none are asked for; null: none enforced."
    )
    max_limits: ServiceLimits | None = Field(
        None, description="The most a session may ask for; null: none enforced."
    )
    packages: dict[str, str] = Field(
        default_factory=dict, description="Python packages of the kernel and their versions."
    )
    images: list[str] = Field(
        default_factory=list,
        description="Kernel images a session may ask for with 'image' (the default first); "
        "empty for the local backend.",
    )
    disk_quota: str = Field(
        "enforced",
        description="'enforced': each workspace is its own filesystem of limits.disk_mb MiB; "
        "otherwise why no disk quota is enforced on this server.",
    )


class SessionPackages(BaseModel):
    """Body of ``GET /v1/sessions/{id}/packages``."""

    session_id: str
    image: str | None = Field(None, description="The kernel image (docker backend).")
    packages: dict[str, str] = Field(
        default_factory=dict, description="Python packages the kernel can import, by name."
    )


class FileEntry(BaseModel):
    name: str
    path: str
    type: Literal["file", "directory", "other"]
    size: int
    modified_at: datetime


class FileList(BaseModel):
    path: str
    entries: list[FileEntry]
    next: str | None = Field(
        None,
        description="When ?limit= left entries out: pass it as ?after= for the next page "
        "(else null).",
    )


class ErrorDetail(BaseModel):
    type: str
    message: str
    execution_id: str | None = Field(
        None, description="session_running: the execution that runs now."
    )
    running_for_s: float | None = Field(
        None, description="session_running: how long it has run (0 while it waits to start)."
    )


class ErrorBody(BaseModel):
    error: ErrorDetail


# ------------------------------------------------------------------------------ stream

EventName = Literal["stdout", "stderr", "output", "clear", "error", "approval_required", "done"]


class TextChunk(BaseModel):
    """Data of the ``stdout`` and ``stderr`` events."""

    text: str


class ClearEvent(BaseModel):
    """Data of the ``clear`` event: the outputs so far were cleared (``clear_output``)."""

    wait: bool = False
