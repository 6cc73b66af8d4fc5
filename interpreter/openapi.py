"""The OpenAPI 3.1 document of API v1, generated from the pydantic models."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from interpreter import models
from interpreter._version import __version__

_MODELS: list[type[BaseModel]] = [
    models.CreateSessionRequest,
    models.ExecuteRequest,
    models.RestartRequest,
    models.RebuildRequest,
    models.Session,
    models.SessionList,
    models.Execution,
    models.Output,
    models.ArtifactRef,
    models.FileList,
    models.ErrorBody,
    models.TextChunk,
    models.ClearEvent,
    models.ErrorInfo,
    models.ServiceInfo,
    models.Approval,
    models.ApprovalList,
    models.DecideRequest,
    models.SessionPackages,
]


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): _json(models.ErrorBody, "Error") for c in codes}


def _body(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": _ref(model)}}}


def openapi_document() -> dict[str, Any]:
    """Build the document; ``docs/openapi.json`` is this, written by ``interp openapi``."""
    _, schemas = models_json_schema(
        [(m, "validation") for m in _MODELS], ref_template="#/components/schemas/{model}"
    )
    sid = {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}}
    common = _errors(401, 404, 422)
    generation = {
        "name": "generation",
        "in": "query",
        "required": False,
        "description": "Act only if the session still runs this kernel generation (409 if not).",
        "schema": {"type": "integer", "minimum": 0, "maximum": 999_999_999_999},
    }
    execution_filter = {
        "name": "execution_id",
        "in": "query",
        "required": False,
        "description": "Only this execution: interrupted if it runs, cancelled if it is "
        "queued (it never runs), nothing if it finished.",
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,100}$"},
    }
    idempotency = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "description": "Retry-safe: a repeat with the same key returns the first result "
        "(header Idempotent-Replayed: true) instead of doing the work again.",
        "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
    }
    paths: dict[str, Any] = {
        "/v1/info": {
            "get": {
                "summary": "The backend, limits and kernel packages of this service",
                "responses": {"200": _json(models.ServiceInfo, "OK"), **_errors(401)},
            },
        },
        "/v1/sessions": {
            "post": {
                "summary": "Create a session (optionally rebuilt from a notebook)",
                "parameters": [idempotency],
                "requestBody": _body(models.CreateSessionRequest, False),
                "responses": {
                    "201": _json(models.Session, "Created"),
                    **_errors(401, 404, 409, 413, 422, 429, 503),
                },
            },
            "get": {
                "summary": "List this key's sessions",
                "description": "Oldest first. With limit, a page: the next one is asked "
                "with after set to the page's next (null on the last page).",
                "parameters": [
                    {
                        "name": "state",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "enum": ["open", "closed", "all"]},
                        "description": "open: not closed (default all)",
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                    },
                    {
                        "name": "after",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string"},
                        "description": "The previous page's next (a session id)",
                    },
                ],
                "responses": {
                    "200": _json(models.SessionList, "Sessions"),
                    **_errors(400, 401, 422),
                },
            },
        },
        "/v1/sessions/{session_id}": {
            "parameters": [sid],
            "get": {
                "summary": "Get a session",
                "responses": {"200": _json(models.Session, "Session"), **common},
            },
            "delete": {
                "summary": "Stop the kernel; notebook and artifacts stay readable",
                "parameters": [generation],
                "responses": {"204": {"description": "Deleted"}, **_errors(401, 404, 409, 422)},
            },
        },
        "/v1/sessions/{session_id}/execute": {
            "parameters": [sid],
            "post": {
                "summary": "Run code; JSON result, or SSE with Accept: text/event-stream",
                "description": "SSE events: stdout, stderr (TextChunk), output (Output), clear "
                "(ClearEvent), error (ErrorInfo), approval_required (Approval: the policy "
                "holds it for a person), done (Execution). A policy may deny the code "
                "(status denied, never run; see Execution.policy). Each event carries an id "
                "(1, 2, ...); a client whose stream broke resumes with GET "
                ".../executions/{execution_id}/events?after=<last id>.",
                "parameters": [idempotency],
                "requestBody": _body(models.ExecuteRequest),
                "responses": {
                    "200": {
                        "description": "Finished execution",
                        "content": {
                            "application/json": {"schema": _ref(models.Execution)},
                            "text/event-stream": {"schema": {"type": "string"}},
                        },
                    },
                    **_errors(401, 404, 409, 410, 413, 422, 429, 507),
                },
            },
        },
        "/v1/sessions/{session_id}/executions/{execution_id}": {
            "parameters": [
                sid,
                {
                    "name": "execution_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
            ],
            "get": {
                "summary": "One execution, also while it runs",
                "description": "While it runs: its output so far (stdout, stderr, the rich "
                "outputs captured, the error if it raised).",
                "responses": {"200": _json(models.Execution, "Execution"), **common},
            },
        },
        "/v1/sessions/{session_id}/executions/{execution_id}/events": {
            "parameters": [
                sid,
                {
                    "name": "execution_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
            ],
            "get": {
                "summary": "An execution's SSE events after an id, then live",
                "description": "The events whose id is above `after` (or the Last-Event-ID "
                "header; all of them when neither is given), then the rest as they happen; "
                "the last is done. An execution no longer in memory answers with done only.",
                "parameters": [
                    {
                        "name": "after",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 0, "maximum": 999_999_999_999},
                    },
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "Server-sent events",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    # 410 events_expired: a resume from before what a flood's log keeps.
                    **_errors(400, 401, 404, 410, 422),
                },
            },
        },
        "/v1/sessions/{session_id}/interrupt": {
            "parameters": [sid],
            "post": {
                "summary": "Interrupt what is running (state kept)",
                "parameters": [generation, execution_filter],
                "responses": {
                    "200": _json(models.Session, "Session"),
                    **_errors(401, 404, 409, 410, 422),
                },
            },
        },
        "/v1/sessions/{session_id}/restart": {
            "parameters": [sid],
            "post": {
                "summary": "Fresh kernel; with recover=true, state rebuilt by replay",
                "parameters": [generation],
                "requestBody": _body(models.RestartRequest, False),
                "responses": {
                    "200": _json(models.Session, "Session"),
                    **_errors(401, 404, 409, 410, 422),
                },
            },
        },
        "/v1/sessions/{session_id}/rebuild": {
            "parameters": [sid],
            "post": {
                "summary": "Re-run a notebook's good cells in this session; report in rebuild",
                "description": "The rebuild of from_notebook, in a session that exists (upload "
                "the files its cells read first), on top of its current state. 409 "
                "session_running while other code runs or waits, or a restart or rebuild is "
                "under way; cells sent during the rebuild wait for all of it. A later rebuild "
                "replaces the report. 503 shutting_down when the service's shutdown stopped "
                "it before its last cell: the session's rebuild report says where "
                "(stopped, stopped_at, not_run).",
                "parameters": [generation],
                "requestBody": _body(models.RebuildRequest),
                "responses": {
                    "200": _json(models.Session, "Session"),
                    **_errors(401, 404, 409, 410, 413, 422, 429, 503, 507),
                },
            },
        },
        "/v1/sessions/{session_id}/files": {
            "parameters": [
                sid,
                {"name": "path", "in": "query", "required": False, "schema": {"type": "string"}},
            ],
            "get": {
                "summary": "List a workspace directory",
                "description": "Directories first, each kind by name. With limit, a page: "
                "the next one is asked with after set to the page's next (null on the last "
                "page).",
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 10000},
                    },
                    {
                        "name": "after",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string"},
                        "description": "The previous page's next (d/NAME or f/NAME)",
                    },
                ],
                "responses": {
                    "200": _json(models.FileList, "Listing"),
                    **_errors(400, 401, 404, 422),
                },
            },
        },
        "/v1/sessions/{session_id}/files/{path}": {
            "parameters": [
                sid,
                {"name": "path", "in": "path", "required": True, "schema": {"type": "string"}},
            ],
            "get": {
                "summary": "Download a workspace file",
                "description": "A single byte range (Range: bytes=A-B, bytes=A- or bytes=-N) "
                "is answered with 206 and Content-Range, a range past the end with 416; "
                "max_download_bytes then applies to the range. A file has no validator: "
                "with If-Range the whole file is sent.",
                "parameters": [
                    {
                        "name": "Range",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    }
                ],
                "responses": {
                    "200": {
                        "description": "File bytes",
                        "content": {
                            "application/octet-stream": {
                                "schema": {"type": "string", "format": "binary"}
                            }
                        },
                    },
                    "206": {"description": "The requested byte range"},
                    # 413: over max_download_bytes, or sparse (mostly holes).
                    **_errors(400, 401, 404, 413, 416),
                },
            },
            "head": {
                "summary": "The file's size (Content-Length), no body",
                "description": "Answers as GET would (200, 206, 413, 416, ...), without the bytes.",
                "responses": {
                    "200": {"description": "Headers only"},
                    "206": {"description": "Headers of the requested byte range"},
                    **_errors(400, 401, 404, 413, 416),
                },
            },
            "put": {
                "summary": "Upload (raw body; Content-Encoding: gzip is undone)",
                "requestBody": {
                    "content": {
                        "application/octet-stream": {
                            "schema": {"type": "string", "format": "binary"}
                        }
                    }
                },
                # 415: a Content-Encoding other than gzip; 503: max_concurrent_uploads
                # are being received, 429: the key's max_concurrent_uploads_per_key are
                # (Retry-After).
                "responses": {
                    "201": {"description": "Stored"},
                    **_errors(400, 401, 404, 413, 415, 429, 503),
                },
            },
            "delete": {
                "summary": "Delete a file or directory",
                "responses": {"204": {"description": "Deleted"}, **_errors(400, 401, 404)},
            },
        },
        "/v1/sessions/{session_id}/notebook": {
            "parameters": [sid],
            "get": {
                "summary": "The session as an nbformat v4 notebook",
                "responses": {
                    "200": {
                        "description": "Notebook",
                        "content": {"application/x-ipynb+json": {"schema": {"type": "object"}}},
                    },
                    **common,
                },
            },
        },
        "/v1/sessions/{session_id}/packages": {
            "parameters": [sid],
            "get": {
                "summary": "The Python packages the session's kernel can import",
                "responses": {"200": _json(models.SessionPackages, "Packages"), **common},
            },
        },
        "/v1/sessions/{session_id}/artifacts/{artifact_id}": {
            "parameters": [
                sid,
                {
                    "name": "artifact_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
            ],
            "get": {
                "summary": "Artifact bytes with their content type",
                "description": "A single byte range (Range: bytes=A-B, bytes=A- or bytes=-N) "
                "is answered with 206 and Content-Range; a range past the end with 416. "
                "Any other Range header is ignored and the whole body sent.",
                "parameters": [
                    {
                        "name": "Range",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    }
                ],
                "responses": {
                    "200": {"description": "Bytes"},
                    "206": {"description": "The requested byte range"},
                    **_errors(401, 404, 416, 422),
                },
            },
            "head": {
                "summary": "The artifact's size (Content-Length) and content type, no body",
                "responses": {"200": {"description": "Headers only"}, **common},
            },
        },
        "/healthz": {
            "get": {
                "summary": "Liveness",
                "security": [],
                "responses": {"200": {"description": "OK"}},
            },
            "head": {
                "summary": "Liveness, headers only",
                "security": [],
                "responses": {"200": {"description": "OK"}},
            },
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "description": "With INTERP_METRICS_KEY set, only that operator key may read "
                "them; an API key for sessions gets 403 forbidden.",
                "responses": {"200": {"description": "Prometheus text"}, **_errors(401, 403)},
            }
        },
    }
    paths.update(_policy_paths())
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "interp: stateful code interpreter API",
            "version": __version__,
            "description": "Every response carries an X-Request-Id header: the request's own "
            "(1 to 128 characters of A-Z a-z 0-9 . _ : = + / @ -) or, when it has none or "
            "another, a generated one. Logs name requests by it.",
        },
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }


def _policy_paths() -> dict[str, Any]:
    """The operator routes of the policy stage (operator keys only: agents get 403)."""
    aid = {"name": "approval_id", "in": "path", "required": True, "schema": {"type": "string"}}
    decide = {
        "requestBody": _body(models.DecideRequest, False),
        "responses": {
            "200": _json(models.Approval, "The decided approval"),
            **_errors(401, 403, 404, 409, 422),
        },
    }
    return {
        "/v1/approvals": {
            "get": {
                "summary": "Executions held for approval (operator key)",
                "parameters": [
                    {
                        "name": "status",
                        "in": "query",
                        "required": False,
                        "schema": {
                            "type": "string",
                            "enum": [
                                "pending",
                                "approved",
                                "denied",
                                "expired",
                                "withdrawn",
                                "all",
                            ],
                        },
                    },
                    {
                        "name": "wait_s",
                        "in": "query",
                        "required": False,
                        "description": (
                            "Wait up to this long: with If-None-Match, for the list to "
                            "differ from that ETag's; without, for one to match."
                        ),
                        "schema": {"type": "number", "minimum": 0, "maximum": 60},
                    },
                    {
                        "name": "If-None-Match",
                        "in": "header",
                        "required": False,
                        "description": "The ETag of the list the client has.",
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": _json(models.ApprovalList, "Approvals"),
                    "304": {"description": "The list is still the one of If-None-Match."},
                    **_errors(401, 403, 422),
                },
            }
        },
        "/v1/approvals/{approval_id}": {
            "parameters": [aid],
            "get": {
                "summary": "One approval (operator key)",
                "responses": {
                    "200": _json(models.Approval, "Approval"),
                    **_errors(401, 403, 404),
                },
            },
        },
        "/v1/approvals/{approval_id}/approve": {
            "parameters": [aid],
            "post": {"summary": "Let the held execution run (operator key)", **decide},
        },
        "/v1/approvals/{approval_id}/deny": {
            "parameters": [aid],
            "post": {"summary": "Deny the held execution (operator key)", **decide},
        },
        "/v1/policy": {
            "get": {
                "summary": "The policy in use and why a change was refused (operator key)",
                "responses": {
                    "200": {
                        "description": "Policy status",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **_errors(401, 403),
                },
            }
        },
    }
