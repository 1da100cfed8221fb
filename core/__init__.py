"""Allot's own library: what every app imports and that imports no app.

Parsing of user input, bulk SQL, raw rows, structured logs, fault points, the SQLite backend and
the environment readers. Nothing here imports ``portal``, ``budgets``, ``scheduling``,
``exceptions`` or ``whatif``; they import it.
"""
