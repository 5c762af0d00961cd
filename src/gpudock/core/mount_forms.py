"""The spellings of a job's bind mount, all stored as ``HOST:CONTAINER[:rw]``.

Two spellings are accepted (``--mount``/``-v``, a job file's ``mounts``, the API):

* gpudock's own, ``HOST:CONTAINER[:ro|rw]``: **read-only unless** ``:rw``;
* Docker's ``--mount`` form, comma-separated ``key=value`` pairs:
  ``type=bind,src=/data,dst=/data[,readonly]``. As in Docker, the source is
  ``source`` or ``src``, the target ``target``, ``destination`` or ``dst``, and
  the mount is **read-write unless** ``readonly`` (or ``ro``) is given, alone or
  as ``readonly=true|false|1|0``. ``type`` may be left out, and must be ``bind``
  when given: gpudock mounts nothing else. Other Docker options
  (``bind-propagation``, volume and tmpfs options) are refused by name.

``canonical_mount`` turns Docker's form into gpudock's, with the mode written
out (``:ro`` or ``:rw``); ``JobSpec`` stores that, so the admin allowlist, the
launcher and ``gpudock show`` see one spelling. Pure, standard library only.
"""

from __future__ import annotations

SOURCE_KEYS = ("source", "src")
TARGET_KEYS = ("target", "destination", "dst")
READONLY_KEYS = ("readonly", "ro")
_TRUE = {"1", "t", "true", "y", "yes", "on"}
_FALSE = {"0", "f", "false", "n", "no", "off"}


def is_docker_form(text: str) -> bool:
    """True when ``text`` is Docker's ``key=value,...`` form (its first item has a ``=``
    before any ``/``); gpudock's form starts with an absolute path."""
    first = text.split(",", 1)[0]
    return "=" in first and not first.startswith("/")


def canonical_mount(text: str) -> str:
    """``text`` in gpudock's form: as written when it is in it; Docker's form as
    ``HOST:CONTAINER:ro`` or ``HOST:CONTAINER:rw``.

    ``ValueError`` (one line, naming the mount) for a Docker form that is not a
    bind mount, lacks a source or target, repeats a key, or names an option
    gpudock does not support; gpudock's own form is checked by
    ``core.job.parse_mount``.
    """
    if not is_docker_form(text):
        return text
    pairs = _pairs(text)
    kind = pairs.pop("type", "bind")
    if kind != "bind":
        raise ValueError(
            f"mount {text!r}: type must be 'bind' (gpudock bind-mounts host paths), got {kind!r}"
        )
    source = _one(text, pairs, SOURCE_KEYS)
    target = _one(text, pairs, TARGET_KEYS)
    readonly = _readonly(text, pairs)
    if pairs:
        raise ValueError(
            f"mount {text!r}: unsupported option {sorted(pairs)[0]!r} (gpudock takes type=bind, "
            "source/src, target/destination/dst and readonly/ro)"
        )
    if source is None or target is None:
        missing = "a source (src=)" if source is None else "a target (dst=)"
        raise ValueError(f"mount {text!r}: {missing} is required")
    if not source.startswith("/") or not target.startswith("/"):
        raise ValueError(f"mount {text!r}: both paths must be absolute")
    if ":" in source or ":" in target:
        raise ValueError(f"mount {text!r}: paths may not contain ':'")
    return f"{source}:{target}:{'ro' if readonly else 'rw'}"


def _pairs(text: str) -> dict[str, str]:
    """The ``key=value`` items of ``text`` (a bare key, as ``readonly``, maps to ``""``)."""
    pairs: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not key:
            raise ValueError(f"mount {text!r}: empty item; write key=value pairs joined by ','")
        if key in pairs:
            raise ValueError(f"mount {text!r}: {key!r} is given twice")
        pairs[key] = value.strip() if sep else ""
        if sep and not pairs[key] and key not in READONLY_KEYS:
            raise ValueError(f"mount {text!r}: {key!r} has no value")
    return pairs


def _one(text: str, pairs: dict[str, str], keys: tuple[str, ...]) -> str | None:
    """The value of whichever of ``keys`` is given (removed from ``pairs``); None if none."""
    given = [key for key in keys if key in pairs]
    if len(given) > 1:
        raise ValueError(f"mount {text!r}: {given[0]!r} and {given[1]!r} say the same; give one")
    return pairs.pop(given[0]) if given else None


def _readonly(text: str, pairs: dict[str, str]) -> bool:
    value = _one(text, pairs, READONLY_KEYS)
    if value is None:
        return False
    word = value.lower()
    if word == "" or word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"mount {text!r}: readonly must be true or false, got {value!r}")
