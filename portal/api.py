"""API conventions shared by every endpoint: errors are JSON with a human message and a field."""

from rest_framework.pagination import LimitOffsetPagination
from rest_framework.views import exception_handler as drf_exception_handler

from core.parsing import parse_int


def _first_field_error(detail, prefix=""):
    if isinstance(detail, dict):
        for key, value in detail.items():
            field = key if key != "non_field_errors" else None
            found = _first_field_error(value, f"{prefix}{field}" if field else prefix)
            if found:
                return found
    elif isinstance(detail, list) and detail:
        return _first_field_error(detail[0], prefix)
    elif detail is not None:
        return (prefix or None, str(detail))
    return None


def exception_handler(exc, context):
    """Wrap DRF's errors as ``{"message": ..., "field": ..., "errors": {...}}``."""
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    found = _first_field_error(detail)
    field, message = found if found else (None, "Request failed")
    if field and field != "detail":
        message = f"{field}: {message}"
    else:
        field = None
    response.data = {"message": message, "field": field, "errors": detail}
    return response


class Pagination(LimitOffsetPagination):
    """``?limit=`` is capped and ``?offset=`` bounded: a huge offset is an empty page, not a
    database overflow."""

    default_limit = 200
    max_limit = 500
    max_offset = 10**9

    def get_offset(self, request):
        offset = parse_int(request.query_params.get(self.offset_query_param), minimum=0)
        return min(offset or 0, self.max_offset)
