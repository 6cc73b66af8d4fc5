"""Service settings: one object, built once by the CLI or a test, then passed down."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from interpreter.models import MIN_CPUS

BackendName = Literal["local", "docker", "auto"]
LogFormat = Literal["text", "json"]
ENV_PREFIX = "INTERP_"
#: The API key has one name everywhere: the server reads it (comma-separated keys), the
#: SDK, the CLI and MCP hosts send it.
API_KEY_ENV = "INTERP_API_KEY"
#: Operator keys (comma-separated): the only keys that decide approvals.
OPERATOR_KEY_ENV = "INTERP_OPERATOR_KEY"
#: One name of a cgroup path: what systemd and the cgroup filesystem both accept.
_CGROUP_NAME = re.compile(r"[A-Za-z0-9_.:@-]+")
#: A default and the largest value a request may ask for in its place: the default must
#: be one a request could ask for, or every request that leaves it out fails.
DEFAULT_WITHIN_MAX: tuple[tuple[str, str], ...] = (
    ("default_timeout_s", "max_timeout_s"),
    ("default_memory_mb", "max_memory_mb"),
    ("default_cpus", "max_cpus"),
    ("default_pids", "max_pids"),
    ("default_disk_mb", "max_disk_mb"),
    # One notebook body must fit in what all of them may hold at once.
    ("max_notebook_body_bytes", "max_large_bodies_bytes"),
    # A key's share of what all keys share is no more than the whole, and one notebook
    # body fits in it.
    ("max_large_bodies_bytes_per_key", "max_large_bodies_bytes"),
    ("max_notebook_body_bytes", "max_large_bodies_bytes_per_key"),
    ("max_concurrent_uploads_per_key", "max_concurrent_uploads"),
    ("max_connections_per_key", "max_connections"),
    # A result's inline text is taken from what the broker keeps in memory.
    ("max_output_bytes", "max_output_hard_bytes"),
)
#: The error type of a default above its maximum (its context names both settings).
DEFAULT_ABOVE_MAX = "default_above_max"


def cgroup_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be the cgroup that kernel containers go under; None if it can."""
    parts = path.strip("/").split("/")
    if any(p in ("", ".", "..") or not _CGROUP_NAME.fullmatch(p) for p in parts):
        return (
            f"{path!r} is not a cgroup path: give names of letters, digits and '_.:@-' "
            "joined by '/', e.g. 'interp-kernels'"
        )
    return None


class Settings(BaseSettings):
    """Every knob of the broker. Environment variables use the ``INTERP_`` prefix."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        populate_by_name=True,
        # No setting means anything at infinity (0 turns the optional ones off), and an
        # infinite default cannot even be written in /v1/info's JSON.
        allow_inf_nan=False,
    )

    host: str = Field("127.0.0.1", description="Address to bind.")
    port: int = Field(8700, ge=0, le=65535, description="Port to bind; 0 picks a free one.")
    data_dir: Path = Field(Path(".data"), description="Root of all state (db, notebooks, ...).")
    runtime_dir: Path | None = Field(
        None,
        description=(
            "Where docker kernels' ipc directories go (each kernel sees its own path there); "
            "default: $XDG_RUNTIME_DIR/interp, else interp-<uid> in the temporary directory."
        ),
    )
    backend: BackendName = Field(
        "auto", description="Kernel backend; 'auto' is docker when an engine answers, else local."
    )
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias=AliasChoices(API_KEY_ENV),
        description="Accepted bearer keys. None: no auth, and only loopback binds are allowed.",
    )
    metrics_key: str | None = Field(
        None,
        min_length=8,
        description="Operator key: when set, /metrics answers only to it (tenant keys get 403).",
    )
    operator_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias=AliasChoices(OPERATOR_KEY_ENV),
        description="Operator keys (comma-separated): they decide approvals (/v1/approvals); "
        "agents' API keys cannot.",
    )
    policy_file: Path | None = Field(
        None,
        description="Policy file (TOML): per-key rules (allow, deny, approve) and limits, "
        "reloaded when it changes. None: no policy stage.",
    )
    policy_poll_s: float = Field(
        2.0, gt=0, description="How often the policy file is checked for changes."
    )
    e2b_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description=(
            "Serve the E2B-compatible surface (code, contexts, files, sandboxes) on this port "
            "of the same host; 49999 for E2B_DEBUG clients, any port for E2B_SANDBOX_URL."
        ),
    )
    e2b_envd_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Also serve the E2B surface here: 49983, where E2B_DEBUG clients send files.",
    )
    log_format: LogFormat = Field(
        "text", description="Log lines of `interp serve`: 'text', or 'json' (one object a line)."
    )

    # Capacity and queueing.
    max_sessions: int = Field(64, ge=1, description="Live sessions across all keys.")
    max_sessions_per_key: int = Field(32, ge=1, description="Live sessions per API key.")
    queue_size: int = Field(8, ge=1, description="Executions waiting per session before 429.")

    # Time.
    idle_timeout_s: float = Field(1800.0, ge=0, description="Cull after this idle time; 0 = off.")
    cull_interval_s: float = Field(30.0, gt=0, description="How often idle sessions are checked.")
    default_timeout_s: float = Field(
        300.0, gt=0, description="Execution timeout when none given (at most max_timeout_s)."
    )
    max_timeout_s: float = Field(3600.0, gt=0, description="Largest timeout_s a request may ask.")
    interrupt_grace_s: float = Field(
        3.0, gt=0, description="After a timeout's interrupt, wait this long before restarting."
    )
    shutdown_grace_s: float = Field(
        0.0,
        ge=0,
        description=(
            "On SIGTERM, running cells get this long to finish (new work gets 503 meanwhile); "
            "then they are interrupted, or left running for the next broker (kept kernels)."
        ),
    )
    max_lifetime_s: float = Field(
        86400.0, ge=0, description="Close a session this long after its creation; 0 = off."
    )
    orphan_kernel_timeout_s: float = Field(
        1800.0,
        ge=0,
        description=(
            "A Docker kernel kept running with no broker looking after it ends itself after "
            "this long (0: never)."
        ),
    )
    kernel_start_timeout_s: float = Field(60.0, gt=0, description="Kernel start deadline.")
    restart_limit: int = Field(
        5, ge=1, description="Automatic kernel restarts allowed within restart_window_s."
    )
    restart_window_s: float = Field(
        600.0, gt=0, description="Window of restart_limit; one more restart fails the session."
    )
    retain_closed_days: float = Field(
        0.0,
        ge=0,
        description=(
            "Remove a closed session's record (notebook, artifacts, workspace files, "
            "executions and audit links) this many days after it closed; 0 keeps them for ever."
        ),
    )
    idempotency_ttl_s: float = Field(
        86400.0, gt=0, description="How long an Idempotency-Key is remembered."
    )
    heartbeat_interval_s: float = Field(
        1.0, ge=0, description="Seconds between kernel heartbeat pings; 0 = no heartbeat."
    )
    heartbeat_misses: int = Field(
        5, ge=1, description="Unanswered heartbeats in a row after which a kernel is frozen."
    )
    iopub_grace_s: float = Field(
        2.0, gt=0, description="After execute_reply, wait this long for the iopub idle."
    )

    # Sizes.
    max_body_bytes: int = Field(1 << 20, ge=1024, description="JSON request body limit.")
    max_notebook_body_bytes: int = Field(
        64 << 20,
        ge=1024,
        description="JSON body limit of the requests that carry a notebook (a creation "
        "from_notebook, a rebuild): a notebook this service wrote holds up to "
        "max_notebook_bytes of output.",
    )
    max_large_bodies_bytes: int = Field(
        128 << 20,
        ge=1024,
        description="Bytes of request bodies over max_body_bytes (notebooks) the broker holds "
        "at once, across requests, until each request is answered; past it 503 with "
        "Retry-After. A notebook's JSON takes up to ten times its size once parsed.",
    )
    max_large_bodies_bytes_per_key: int = Field(
        64 << 20,
        ge=1024,
        description="Of max_large_bodies_bytes, what the requests of one API key hold at once "
        "(its share; at least max_notebook_body_bytes); past it that key gets 429 with "
        "Retry-After, so that one key cannot take the whole budget.",
    )
    max_upload_bytes: int = Field(100 << 20, ge=1, description="File upload limit.")
    max_output_bytes: int = Field(
        100_000, ge=1000, description="Inline stdout+stderr per execution before head/tail cut."
    )
    max_output_hard_bytes: int = Field(
        4 << 20,
        ge=1000,
        description="Stream text kept in the broker's memory per execution; past it the text "
        "spills to disk (max_output_spill_bytes) for the full-text artifact.",
    )
    max_output_spill_bytes: int = Field(
        1 << 30,
        ge=0,
        description="Stream text past max_output_hard_bytes written to disk per execution, "
        "for its full-text artifact; past it text is dropped with a notice. 0: no spill "
        "(text past max_output_hard_bytes is dropped).",
    )
    max_session_spill_bytes: int = Field(
        4 << 30,
        ge=0,
        description="Stream text one session's cells spill to disk in all (their full-text "
        "artifacts): past it a cell's text past max_output_hard_bytes is dropped with a "
        "notice, so that one session cannot fill the data disk that all share.",
    )
    max_session_artifact_bytes: int = Field(
        4 << 30,
        ge=0,
        description="Artifacts one session stores in all (rich outputs such as plots, "
        "full texts of cut output), counted from the broker's start: past it a cell's new "
        "plots and other large rich values are not stored, its stderr saying so, so that "
        "one session cannot fill the data disk that all share. 0: no limit.",
    )
    inline_rich_bytes: int = Field(
        64_000, ge=1000, description="Rich text outputs larger than this become artifacts."
    )
    max_rich_output_bytes: int = Field(
        64 << 20,
        ge=1 << 20,
        description="Characters of rich output (display values and their metadata) one "
        "execution holds at once, in its answer, its record and its notebook cell; past it "
        "further displays are left out, its stderr saying once how many. A cleared or "
        "replaced display gives its characters back.",
    )
    max_notebook_bytes: int = Field(
        64 << 20,
        ge=0,
        description="Output a session's notebook holds (characters of its cells' outputs) "
        "before rich values are left out of it (kept as their artifacts, or small ones in "
        "the execution's record), the notebook naming each with a note. 0: no budget "
        "(every value in the notebook).",
    )
    max_kernel_message_bytes: int = Field(
        32 << 20,
        ge=1 << 20,
        description="Largest message taken from a kernel; a larger one is dropped with a notice.",
    )
    max_download_bytes: int = Field(
        2 << 30, ge=1, description="Largest workspace file a download sends (sparse ones refused)."
    )

    # Connections (docs/operations.md "Connection limits").
    max_connections: int = Field(
        512,
        ge=8,
        description="Open HTTP connections at most (lowered to half the descriptor limit).",
    )
    max_connections_per_key: int = Field(
        128,
        ge=1,
        description="Of max_connections, the connections whose last request came with one "
        "API key (its share; lowered in proportion with max_connections). A connection "
        "past it closes that key's longest idle one, or, when all of them have a request "
        "in progress, is answered 429 with Retry-After and closed.",
    )
    max_unauthenticated_connections: int = Field(
        64,
        ge=1,
        description="Connections not yet past authentication; past it the oldest is closed.",
    )
    header_timeout_s: float = Field(
        30.0, gt=0, description="Time to send a request's headers (and keep-alive idle time)."
    )
    body_timeout_s: float = Field(600.0, gt=0, description="Time to send a request's body.")
    max_concurrent_uploads: int = Field(
        16, ge=1, description="Uploads received at once; past it 503 with Retry-After."
    )
    max_concurrent_uploads_per_key: int = Field(
        8,
        ge=1,
        description="Of max_concurrent_uploads, the uploads one API key sends at once (its "
        "share); past it that key gets 429 with Retry-After, so that one key cannot take "
        "every upload slot.",
    )

    # Docker backend.
    docker_image: str = Field("interp-kernel:latest", description="Kernel image for docker.")
    docker_images: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Other images a session may ask for with 'image' (comma-separated), e.g. "
        "images built FROM interp-kernel:latest; the default image is always allowed.",
    )
    docker_runtime: str | None = Field(None, description="Container runtime, e.g. 'runsc'.")
    docker_cgroup_parent: str | None = Field(
        None,
        description="cgroup all kernel containers go under, e.g. 'interp-kernels' (a slice "
        "such as 'interp-kernels.slice' with the systemd driver), to weigh or cap their CPU "
        "together; unset: the engine's default.",
    )
    default_memory_mb: int = Field(
        1024, ge=64, description="Per-session memory by default (at most max_memory_mb)."
    )
    default_cpus: float = Field(
        1.0, ge=MIN_CPUS, description="Per-session CPUs by default (at most max_cpus)."
    )
    default_pids: int = Field(
        256, ge=16, description="Per-session pids limit by default (at most max_pids)."
    )
    max_memory_mb: int = Field(4096, ge=64, description="Largest memory_mb a session may ask.")
    max_cpus: float = Field(2.0, ge=MIN_CPUS, description="Largest cpus a session may ask.")
    max_pids: int = Field(1024, ge=16, description="Largest pids a session may ask.")
    tmp_size_mb: int = Field(256, ge=16, description="Size of the container's /tmp tmpfs.")
    default_disk_mb: int = Field(
        1024,
        ge=0,
        description="Workspace disk quota per session by default (0: none; at most max_disk_mb).",
    )
    max_disk_mb: int = Field(10240, ge=8, description="Largest disk_mb a session may ask.")
    min_free_mb: int = Field(
        256, ge=0, description="Free space floor of the data directory; below it, 507 storage_full."
    )
    pool_size: int = Field(2, ge=0, description="Pre-started docker kernels kept warm.")
    keep_containers_on_shutdown: bool = Field(
        True, description="On shutdown, leave docker kernels running so a restart reattaches."
    )

    @field_validator("data_dir", "runtime_dir")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        # Resolved once, here: kernels run in their workspace, where a relative path (and
        # the ipc socket paths built from it) would point somewhere else.
        return value.expanduser().absolute()

    @field_validator("docker_images", mode="before")
    @classmethod
    def _split_images(cls, value: object) -> object:
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return value

    @field_validator("api_keys", "operator_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        # An empty key is one no client can send: a service with only such keys answers
        # every request 401, and counts as authenticated when it binds beyond loopback.
        # A blank variable is no keys at all, and blanks between commas are dropped
        # ("a,b," is a and b); but a variable of commas alone, or an empty key given as a
        # flag, meant keys that are not there, and is refused.
        if isinstance(value, str):
            keys = [k.strip() for k in value.split(",") if k.strip()]
            value = keys if keys or not value.strip() else [""]
        if isinstance(value, list) and any(
            isinstance(k, str) and k.strip() and not (k.isascii() and k.isprintable())
            for k in value
        ):
            raise PydanticCustomError(
                "unsendable_key",
                "a key with a character no client can send in a header (a line break, a tab, "
                "a typographic quote): keys are printable ASCII",
            )
        if isinstance(value, list) and any(isinstance(k, str) and not k.strip() for k in value):
            raise PydanticCustomError(
                "empty_key",
                "an empty key, which no client can send: give keys of at least one "
                "character (comma-separated in the variable), or none at all",
            )
        return value

    @field_validator("docker_cgroup_parent")
    @classmethod
    def _cgroup_parent(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        problem = cgroup_path_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("metrics_key", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value.strip() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _defaults_within_maximums(self) -> Settings:
        # A default left unset follows a lower maximum (``--max-timeout-s 60`` alone means
        # 60 s by default too); a default given above its maximum is an error.
        for default, most in DEFAULT_WITHIN_MAX:
            low, high = getattr(self, default), getattr(self, most)
            if low <= high:
                continue
            if default not in self.model_fields_set:
                object.__setattr__(self, default, type(low)(high))
                continue
            raise PydanticCustomError(
                DEFAULT_ABOVE_MAX,
                "{default}={low} is above {most}={high}",
                {
                    "default": default,
                    "most": most,
                    "low": low,
                    "high": high,
                    "most_given": most in self.model_fields_set,
                },
            )
        return self

    @model_validator(mode="after")
    def _ports_apart(self) -> Settings:
        # Two surfaces on one fixed port: the second bind failed with "address already in
        # use; stop what listens there", blaming another program for the flags' clash.
        named = [("port", self.port), ("e2b_port", self.e2b_port)]
        named.append(("e2b_envd_port", self.e2b_envd_port))
        fixed = [(name, value) for name, value in named if value]
        for i, (name, value) in enumerate(fixed):
            for other, same in fixed[i + 1 :]:
                if value == same:
                    raise PydanticCustomError(
                        "ports_clash",
                        "{name} and {other} are both {value}: each surface needs its own "
                        "port (or 0 for a free one)",
                        {"name": name, "other": other, "value": value},
                    )
        return self

    @property
    def db_path(self) -> Path:
        return self.data_dir / "state.db"

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    def session_dir(self, session_id: str) -> Path:
        return self.sessions_dir / session_id
