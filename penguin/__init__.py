"""The application layer: the ``penguin`` command line, the HTTP server and the Web App.

Owns: everything a person or a host program touches directly (argument parsing, terminal
rendering, HTTP routes, static pages).  Does not: implement engine, trace or replay behaviour;
it calls the libraries below it (``replay`` -> ``engine`` -> ``projections`` -> ``eventstore``).
"""

from __future__ import annotations
