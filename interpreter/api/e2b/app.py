"""The E2B-compatible application: its route table, served on its own port(s)."""

from __future__ import annotations

from typing import Any

import tornado.web

from interpreter.api.base import BaseHandler
from interpreter.api.e2b import code, control, files, filesystem
from interpreter.api.e2b.base import E2BNotFoundHandler
from interpreter.api.e2b.connect_rpc import UnimplementedHandler
from interpreter.api.e2b.sandboxes import Sandboxes
from interpreter.broker import SessionBroker
from interpreter.settings import Settings

#: A protobuf package, service or method name (as a Connect-RPC path segment).
_NAME = "[A-Za-z_][A-Za-z0-9_]{0,99}"

#: Route template (the ``route`` of access lines and metrics) -> handler. Templates are
#: prefixed ``e2b:`` in logs so they never read as ``/v1`` routes.
ROUTES: list[tuple[str, str, type[BaseHandler]]] = [
    ("/execute", "/execute", code.ExecuteHandler),
    ("/contexts", "/contexts", code.ContextsHandler),
    ("/contexts/(?P<context_id>[A-Za-z0-9_-]{1,100})", "/contexts/{id}", code.ContextHandler),
    (
        "/contexts/(?P<context_id>[A-Za-z0-9_-]{1,100})/restart",
        "/contexts/{id}/restart",
        code.ContextRestartHandler,
    ),
    ("/files", "/files", files.FilesHandler),
    ("/health", "/health", files.HealthHandler),
    ("/(?:v2/)?sandboxes", "/sandboxes", control.SandboxesHandler),
    ("/sandboxes/(?P<sandbox_id>[A-Za-z0-9_-]{1,100})", "/sandboxes/{id}", control.SandboxHandler),
    (
        "/sandboxes/(?P<sandbox_id>[A-Za-z0-9_-]{1,100})/timeout",
        "/sandboxes/{id}/timeout",
        control.SandboxTimeoutHandler,
    ),
    (
        "/(?:v2/)?sandboxes/(?P<sandbox_id>[A-Za-z0-9_-]{1,100})/connect",
        "/sandboxes/{id}/connect",
        control.SandboxConnectHandler,
    ),
    (
        "/(?:v2/)?sandboxes/(?P<sandbox_id>[A-Za-z0-9_-]{1,100})/(?P<action>[A-Za-z0-9_-]{1,100})",
        "/sandboxes/{id}/{action}",
        control.SandboxActionHandler,
    ),
    *[
        (
            f"/{filesystem.SERVICE}/(?P<method>{method})".replace(".", r"\."),
            f"/{filesystem.SERVICE}/{method}",
            filesystem.FilesystemHandler,
        )
        for method in filesystem.METHODS
    ],
    # Every other Connect-RPC method (/<package>.<Service>/<Method>): 501 unimplemented.
    (
        "/(?P<service>" + _NAME + r"(?:\." + _NAME + "){1,5})/(?P<method>" + _NAME + ")",
        "/{service}/{method}",
        UnimplementedHandler,
    ),
]


def _log_request(handler: tornado.web.RequestHandler) -> None:
    if isinstance(handler, BaseHandler):
        handler.log_access()


def make_e2b_app(broker: SessionBroker, settings: Settings) -> tornado.web.Application:
    deps: dict[str, Any] = {
        "broker": broker,
        "settings": settings,
        "sandboxes": Sandboxes(broker),
    }
    return tornado.web.Application(
        [
            (pattern, handler, {**deps, "route": "e2b:" + template})
            for pattern, template, handler in ROUTES
        ],
        default_handler_class=E2BNotFoundHandler,
        default_handler_args=deps,
        compress_response=False,
        xheaders=False,
        log_function=_log_request,
    )
