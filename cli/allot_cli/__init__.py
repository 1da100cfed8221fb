"""``allot``: the researcher's terminal client of Allot's REST API."""

__version__ = "0.1.0"
