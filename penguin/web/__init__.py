"""The Web App (SPEC §20): static HTML, CSS and ES modules served at ``/``.

Owns: locating the files shipped in the package and serving them with a strict
Content-Security-Policy (R-WEB-5).  Does not: talk to sessions (the page calls the §19 API).
"""

from __future__ import annotations

from ._static import CSP, STATIC_DIR, web_app

__all__ = ["CSP", "STATIC_DIR", "web_app"]
