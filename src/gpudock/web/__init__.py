"""The web dashboard at ``/ui``: static files plus the little JSON the page needs.

The page itself is plain HTML, CSS and JavaScript in ``static/`` (no build
step, nothing fetched from the internet); it reads the ``/v1`` API with the
HttpOnly cookie that ``POST /ui/login`` sets.
"""

from gpudock.web.router import router

__all__ = ["router"]
