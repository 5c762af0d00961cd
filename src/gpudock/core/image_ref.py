"""Docker's image reference grammar, checked when a job is submitted.

The grammar is that of the Docker distribution library
(``distribution/reference``)::

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [ domain "/" ] path-component { "/" path-component }
    domain     := host [ ":" port ]   (a host with a dot, "localhost", or any host with a port)
    path-component := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
    tag        := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
    digest     := algorithm ":" hex{32,}

A first component without a dot or a port that is not ``localhost`` is a
path component (so ``Foo/bar`` is refused: repository names are lowercase),
exactly as Docker reads it. The name is at most 255 characters.
``IMAGE_REFERENCE_PATTERN`` is the same rule as one regular expression, for
the OpenAPI schema.
"""

from __future__ import annotations

import re

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PORT = r"(?::[0-9]+)"
_DOMAIN = (
    rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})+{_PORT}?"
    rf"|{_DOMAIN_COMPONENT}{_PORT}"
    rf"|localhost"
    rf"|\[[a-fA-F0-9:]+\]{_PORT}?)"
)
REGISTRY_PATTERN = rf"^{_DOMAIN}$"
"""A registry host as an image reference names it: ``host.domain[:port]``,
``host:port``, ``localhost[:port]`` or ``[ipv6][:port]`` (``core/registries.py``)."""
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"

IMAGE_REFERENCE_PATTERN = (
    rf"^(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?$"
)
MAX_NAME_LENGTH = 255
MAX_REFERENCE_LENGTH = 255
"""gpudock bounds the whole reference (tag and digest included) by Docker's name limit,
so that the OpenAPI schema can say it (``maxLength``)."""

_REFERENCE = re.compile(IMAGE_REFERENCE_PATTERN)
_TAG_RE = re.compile(_TAG)
_DIGEST_RE = re.compile(_DIGEST)


def check_image_reference(value: str) -> str:
    """Return ``value`` if Docker would accept it as an image reference.

    Raises ``ValueError`` with one line saying what is wrong (empty,
    whitespace, uppercase repository, bad tag, bad digest, too long).
    """
    if not value.strip():
        raise ValueError("image must not be empty")
    if any(c.isspace() for c in value):
        raise ValueError(f"image {value!r} must not contain whitespace")
    if len(value) > MAX_REFERENCE_LENGTH:
        raise ValueError(
            f"image reference is {len(value)} characters; at most {MAX_REFERENCE_LENGTH} "
            "are allowed"
        )
    if _REFERENCE.fullmatch(value):
        name = value.split("@", 1)[0]
        if ":" in name.rsplit("/", 1)[-1]:
            name = name.rsplit(":", 1)[0]
        if len(name) > MAX_NAME_LENGTH:
            raise ValueError(
                f"image name is {len(name)} characters; Docker allows at most {MAX_NAME_LENGTH}"
            )
        return value
    raise ValueError(f"image {value!r} is not a valid Docker image reference: {_why(value)}")


def _why(value: str) -> str:
    """A best guess at which part of ``value`` breaks the grammar, for the message."""
    rest, _, digest = value.partition("@")
    if digest and not _DIGEST_RE.fullmatch(digest):
        return f"digest {digest!r} must look like sha256:<64 hex digits>"
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        tag = last.rsplit(":", 1)[1]
        if not _TAG_RE.fullmatch(tag):
            return f"tag {tag!r} must be 1-128 of letters, digits, '_', '.', '-'"
    components = rest.split("/")
    components[-1] = components[-1].split(":", 1)[0]
    first = components[0]
    if len(components) > 1 and ("." in first or ":" in first or first == "localhost"):
        components = components[1:]  # a registry host may have capitals; names may not
    if any(c.isupper() for part in components for c in part):
        return "repository names must be lowercase"
    return "expected [registry/]name[:tag][@digest] with lowercase path components"
