"""Structured logs: ``event(log, "pass", cluster="jupiter", started=3)``.

An event is a log record whose message is its name and whose fields travel in ``extra=``.
With ``LOG_FORMAT=json`` every line, Django's, Celery's and ours, is one JSON object
(python-json-logger) holding the fields as keys; with the default ``text`` the fields follow
the message as ``key=value``, so the same call reads well on a terminal. Field names must not
be LogRecord attributes (``name``, ``message``, ``args``...): logging refuses those.
"""

import logging

from django.core.exceptions import ImproperlyConfigured

FORMATS = ("text", "json")
_RECORD_FIELDS = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields) -> None:
    logger.log(level, name, extra={"event": name, **fields})


def extra_fields(record: logging.LogRecord) -> dict:
    return {k: v for k, v in record.__dict__.items() if k not in _RECORD_FIELDS}


class TextFormatter(logging.Formatter):
    def format(self, record):
        line = super().format(record)
        fields = extra_fields(record)
        fields.pop("event", None)
        if fields:
            line += " " + " ".join(f"{key}={value}" for key, value in fields.items())
        return line


class TaskContext(logging.Filter):
    """Adds the Celery task's name and id to records logged while a task runs."""

    def filter(self, record):
        from celery import current_task  # here: logging is configured before Celery loads

        task = current_task
        if task and getattr(task, "request", None) and task.request.id:
            record.task_id = task.request.id
            record.task_name = task.name
        return True


FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s"


def formatter(log_format: str) -> logging.Formatter:
    if log_format == "json":
        from pythonjsonlogger.json import JsonFormatter

        renamed = {"levelname": "level", "name": "logger"}
        # "time": ISO 8601 in UTC, whatever TIME_ZONE says, as log collectors expect.
        return JsonFormatter(
            "%(levelname)s %(name)s %(message)s", rename_fields=renamed, timestamp="time"
        )
    return TextFormatter(FIELDS)


def logging_config(log_format: str, level: str) -> dict:
    if log_format not in FORMATS:
        raise ImproperlyConfigured(f"LOG_FORMAT must be one of {', '.join(FORMATS)}")
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"task": {"()": TaskContext}},
        "formatters": {"allot": {"()": formatter, "log_format": log_format}},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "allot", "filters": ["task"]}
        },
        # Django's own loggers come with handlers of their own (its DEFAULT_LOGGING, applied
        # first): without this, runserver's request lines and DEBUG's console stay plain text,
        # or are printed twice.
        "loggers": {
            "django": {"handlers": [], "level": "INFO", "propagate": True},
            "django.server": {"handlers": [], "level": "INFO", "propagate": True},
        },
        "root": {"handlers": ["console"], "level": level},
    }
