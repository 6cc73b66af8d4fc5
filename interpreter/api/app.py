"""The tornado application: one route table, dependencies injected into handlers."""

from __future__ import annotations

import tornado.web

from interpreter.api.base import BaseHandler, NotFoundHandler
from interpreter.api.handlers import route_table
from interpreter.broker import SessionBroker
from interpreter.settings import Settings


def _log_request(handler: tornado.web.RequestHandler) -> None:
    # Every route, and the default handler, is a BaseHandler: one access line each.
    if isinstance(handler, BaseHandler):
        handler.log_access()


def make_app(broker: SessionBroker, settings: Settings) -> tornado.web.Application:
    deps = {"broker": broker, "settings": settings}
    return tornado.web.Application(
        route_table(deps),
        default_handler_class=NotFoundHandler,
        default_handler_args=deps,
        compress_response=False,
        xheaders=False,
        log_function=_log_request,
    )
