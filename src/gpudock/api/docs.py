"""The interactive API docs, served offline: ``/docs`` (Swagger UI) and ``/redoc``.

``fastapi-offline`` serves both pages' scripts and styles from the server itself
(``/static-offline-docs``), so the pages work with no outside network. The two
HTML pages also carry a ``Content-Security-Policy`` that lets them load and
call nothing but this server: Swagger UI needs nothing else, and ReDoc's one
outside reference (the Redocly logo in its sidebar) is refused by the browser
before a request leaves the machine; the page hides the broken image.

``edge.py`` adds the policy to both pages. Both pages, ``/openapi.json`` and
the assets need no token; "Authorize" in
Swagger UI takes a bearer token (the ``bearer`` scheme of ``api/deps.py``).
"""

from __future__ import annotations

DOC_PAGES = frozenset({"/docs", "/redoc"})
POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline'",  # each page starts its UI from an inline script
        "style-src 'self' 'unsafe-inline'",  # both UIs set inline styles
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",  # /openapi.json and "Try it out": this server only
        "worker-src 'self' blob:",  # ReDoc's search index runs in a blob worker
        "frame-ancestors 'none'",
    )
)
