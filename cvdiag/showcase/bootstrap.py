"""The showcase's shared bootstrap (``_shared/cvdiag_bootstrap.py``) as cvdiag: ``setup``,
``emit_cvdiag``, ``current_tier``, and the one emitter the showcase face writes through.

The showcase reads its flag live (its tests set ``CVDIAG_BACKEND_EMITTER`` with
``monkeypatch.setenv`` after import, and unset it again) and resolves its tier when ``setup`` is
called with a mapping. cvdiag resolves settings once, per emitter. So the face keeps one
process-wide emitter and builds it again, through ``configure``, whenever what decides it has
changed since: the flag, and the tier's inputs (``setup``'s mapping and the environment). Its one
sink writes each line to ``sys.stdout`` as it stands when the line is emitted, at once, where the
showcase's tests read it back with ``capsys``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any, Final

from cvdiag.asgi.headers import edge_value
from cvdiag.core.context import RequestContext
from cvdiag.core.guard import record_failure
from cvdiag.core.settings import Settings
from cvdiag.pipeline import emitter as _emitters
from cvdiag.pipeline.emitter import Emitter, configure
from cvdiag.schema.ids import sanitize_slug
from cvdiag.schema.vocabulary import EDGE_HEADER_KEYS
from cvdiag.scrubbing.redact import scrub_head
from cvdiag.showcase.context import showcase_test_id
from cvdiag.sinks import SysStdoutSink

__all__ = ["current_tier", "emit_cvdiag", "setup"]

#: What the tier is resolved from, in the showcase as in cvdiag (``docs/configuration.md``).
TIER_KEYS: Final = (
    "CVDIAG_DEBUG",
    "CVDIAG_VERBOSE",
    "SHOWCASE_ENV",
    "RAILWAY_ENVIRONMENT_NAME",
    "PYTHON_ENV",
)
_FLAG: Final = "CVDIAG_BACKEND_EMITTER"

#: The tier's inputs as ``setup`` was last given them; None: the live environment's.
_given: dict[str, str] | None = None
#: What the emitter in force was built from, and that emitter.
_built: tuple[tuple[str | None, ...], Emitter] | None = None
_lock = threading.Lock()


def setup(env: Mapping[str, str] | None = None) -> None:
    """Resolve the tier again, from ``env`` (``None``: the environment alone).

    The showcase's tests call it to switch to the debug tier and back. The tier in force is the
    higher of ``env``'s and the live environment's, read as each request comes in. A
    ``CVDIAG_DEBUG`` refused (no environment label, or one that is not a development one) falls
    back to the tier below and says so once on stderr, as cvdiag does; it never raises into the
    host.
    """
    global _given
    try:
        _given = None if env is None else {k: str(env[k]) for k in TIER_KEYS if k in env}
    except Exception as exc:  # a mapping that fails to read: the environment's, then
        record_failure("showcase", exc)
        _given = None
    face_emitter()


def _inputs() -> tuple[str | None, ...]:
    environ = os.environ
    live = (environ.get(_FLAG), *(environ.get(k) for k in TIER_KEYS))
    given = _given
    if given is None:
        return live
    return (*live, "given", *(given.get(k) for k in TIER_KEYS))


def face_emitter() -> Emitter:
    """The emitter in force for the showcase face, built again if its inputs changed.

    A few environment lookups per call: the price of the showcase's live flag.
    """
    global _built
    inputs = _inputs()
    built = _built
    if built is not None and built[0] == inputs:
        return _in_force(built[1])
    with _lock:
        built = _built
        if built is not None and built[0] == inputs:
            return _in_force(built[1])
        settings = Settings.from_env(os.environ)
        if _given is not None:
            # The higher of the two tiers: setup's mapping switches the tier (the showcase's
            # tests switch to debug and back with it), and the showcase's emitter also reads
            # the tier live, so a CVDIAG_VERBOSE set after setup() still counts.
            environ = {k: v for k, v in os.environ.items() if k not in TIER_KEYS}
            given = Settings.from_env({**environ, **_given})
            if given.tier > settings.tier:
                settings = given
        emitter = configure(settings, sinks=[SysStdoutSink()])
        _built = (inputs, emitter)
        return emitter


def _in_force(own: Emitter) -> Emitter:
    """The face's emitter, or the one installed by hand since it was built (``configure()``, the
    ``cvdiag_events`` fixture): that one is in force for cvdiag's middleware and scopes too, until
    the flag or the tier changes and the face builds its own again."""
    current = _emitters._emitter
    return own if current is None else current


def forget() -> None:
    """Forget the emitter the face built: the next use builds one again (tests)."""
    global _built
    with _lock:
        _built = None


def current_tier() -> str:
    """The tier in force: ``default``, ``verbose`` or ``debug`` (lower once DEBUG's bounds are
    reached and it falls back)."""
    return face_emitter().tier.label


def emit_cvdiag(envelope: Mapping[str, Any]) -> None:
    """Write one envelope given as a v1 dict, through cvdiag's one emit path.

    cvdiag builds the line itself from what the dict says (boundary, outcome, test id, slug,
    demo, duration, metadata, edge headers): it stamps its own ``ts``, ``mono_ns`` and span id,
    keeps only the schema's metadata keys and the nine edge headers, and scrubs them all; the
    test id is the showcase's (a UUIDv7 kept, anything else replaced). Nothing is written while
    the flag is off. Never raises.
    """
    try:
        emitter = face_emitter()
        if not emitter.enabled or not isinstance(envelope, Mapping):
            return
        test_id = showcase_test_id(_text(envelope.get("test_id")))
        context = RequestContext(
            test_id=test_id,
            trace_id=test_id,  # as the showcase's envelopes say it
            slug=sanitize_slug(_text(envelope.get("slug"))) or "unknown",
            demo=sanitize_slug(_text(envelope.get("demo"))) or "default",
        )
        duration = envelope.get("duration_ms")
        metadata = envelope.get("metadata")
        emitter.emit(
            scrub_head(str(envelope.get("boundary")), 64),
            outcome=str(envelope.get("outcome") or "info"),
            metadata=metadata if isinstance(metadata, Mapping) else None,
            duration_ms=duration if isinstance(duration, (int, float)) else None,
            context=context,
            parent_span_id=None,
            edge_headers=_edge_bag(envelope.get("edge_headers")),
        )
    except Exception as exc:
        record_failure("showcase", exc)


def _edge_bag(given: object) -> dict[str, str | None] | None:
    """The closed nine-key bag, each value scrubbed and cut as the middleware's are."""
    if not isinstance(given, Mapping):
        return None
    bag: dict[str, str | None] = dict.fromkeys(EDGE_HEADER_KEYS)
    for key in EDGE_HEADER_KEYS:
        value = given.get(key)
        if isinstance(value, (str, bytes)):
            bag[key] = edge_value(value)
    return bag


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
