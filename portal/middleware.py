"""Refuse NUL bytes at the door: PostgreSQL cannot store them, and some views read raw
``request.POST``. One check for every page and endpoint, naming the field at fault. And answer
a locked SQLite database with 503, not 500."""

import logging
import sys

from django.core.signals import got_request_exception
from django.db import OperationalError
from django.http import HttpResponse, HttpResponseBadRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError

log = logging.getLogger(__name__)


def _field_with_nul(request) -> str | None:
    if "\x00" in request.path:
        return "path"
    sources = [request.GET]
    if request.method == "POST" and request.content_type in {
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    }:
        sources.append(request.POST)
    for data in sources:
        for key, values in data.lists():
            if "\x00" in key or any("\x00" in value for value in values):
                return key.replace("\x00", "\\0")
    return None


def refuse_nul_bytes(get_response):
    def middleware(request):
        try:
            field = _field_with_nul(request)
        except MultiPartParserError:
            field, message = "body", "body: malformed form data."
        else:
            if field is None:
                return get_response(request)
            message = f"{field}: NUL characters are not allowed."
        if request.path.startswith("/api/"):
            return JsonResponse({"message": message, "field": field}, status=400)
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")

    return middleware


RETRY_AFTER_S = 5


def _database_locked(exc: Exception) -> bool:
    """SQLite's "database is locked": its single writer was busy past the busy timeout."""
    return isinstance(exc, OperationalError) and "database is locked" in str(exc)


class LockedDatabaseIs503:
    """A backstop for the SQLite demo: a request that waited out the busy timeout for SQLite's
    one write lock answers 503 with Retry-After (the client may simply retry), never a 500.
    The request's own atomic blocks rolled back as the error left them, so nothing was half
    written. Any other database error still is a 500. PostgreSQL never raises this.

    The view's error comes through ``process_exception``. A middleware that writes after the
    view (the session's save, for one) raises where Django turns the error into a 500 at once,
    inside that middleware's own wrapper, before an outer middleware could catch it; Django
    announces it with ``got_request_exception`` first. So this middleware sits outermost, marks
    the request when the announced error is a locked database, and answers that 500 with the
    503 instead."""

    MARK = "_allot_database_locked"

    def __init__(self, get_response):
        self.get_response = get_response
        got_request_exception.connect(_mark_locked, dispatch_uid="allot.locked_database")

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code == 500 and getattr(request, self.MARK, False):
            return self._busy(request)
        return response

    def process_exception(self, request, exc):
        if not _database_locked(exc):
            return None
        return self._busy(request)

    @staticmethod
    def _busy(request):
        log.warning("%s %s: database is locked; answered 503", request.method, request.path)
        message = "The database is busy; retry in a few seconds."
        if request.path.startswith("/api/"):
            response = JsonResponse({"message": message, "field": None}, status=503)
        else:
            response = HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response


def _mark_locked(sender, request=None, **kwargs):
    """Sent while Django handles the error: ``sys.exc_info()`` is that error."""
    if request is not None and _database_locked(sys.exc_info()[1]):
        setattr(request, LockedDatabaseIs503.MARK, True)
