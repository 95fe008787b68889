"""The ``penguin`` commands, one module per command (SPEC §16).

Each module holds a command's typer signature and its wiring: parse the options, call the
library, hand the result to a view.  The app registers them by name in ``_app.COMMANDS`` and
imports one only when it runs or help lists it (start-up, issue 18), so nothing is re-exported
here.
"""
