"""User names: who a token acts as, who a queue or group lists as a member.

gpudock keeps no user table: a user exists once a token names it. So a name
in a queue's ``members`` or a group is checked only against this pattern,
never against a list of known users (a member may get a token later).
"""

from __future__ import annotations

import re

from gpudock.core import spec_schema

USER_PATTERN = re.compile(spec_schema.USER_PATTERN)  # the OpenAPI schema says the same
USER_HELP = "1-64 letters, digits, '_', '.', '@', '-', starting with a letter or digit"


def check_user(name: str) -> str:
    """Return ``name`` if it is a valid user name; raise ``ValueError`` naming the rule."""
    if not isinstance(name, str) or not USER_PATTERN.fullmatch(name):
        raise ValueError(f"user {name!r} must be {USER_HELP}")
    return name
