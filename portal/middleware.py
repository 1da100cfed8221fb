"""Refuse NUL bytes at the door: PostgreSQL cannot store them, and some views read raw
``request.POST``. One check for every page and endpoint, naming the field at fault."""

from django.http import HttpResponseBadRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError


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
