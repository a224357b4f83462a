"""Why a test flapped: one class, a one-line reason, and the envelopes it rests on.

The facts of a test id are gathered envelope by envelope (``facts.Facts``); the rules (``mock``,
``rules``, ``edge``, ``waiting``, ``protocol_rule``) are then checked in a fixed order and the first
that holds wins:

1. ``mock-fixture-mismatch`` – a mock LLM provider matched no fixture for a call (its error code
   ``no_fixture_match`` or the like), and no call answered ok after it: the test's fixtures.
2. ``provider-rate-limited`` – the provider answered 429, and that decided the outcome.
3. ``provider-error`` – LLM calls failed (5xx, a transport error, an error the provider
   reported in the body), in-band or not.
4. ``edge-interference`` – an edge (Cloudflare, a proxy) acted between client and backend: a
   mitigation, a status the client got that the app did not send, a response cut on the way,
   a connection closed after a proxy's idle timeout. A proxy's header alone is context.
5. ``backend-error`` – the backend caught an exception, the provider refused its request (a
   4xx), or it reported an error in-band.
6. ``stalled-backend`` – an LLM call was still waiting when the request ended (no answer, or
   a stream gone silent), or the backend otherwise kept the client waiting: nothing sent after
   its calls answered, or a client found gone just after a long wait.
7. ``slow-first-token`` – the first byte, a call's first token or the first content event
   passed the timeout.
8. ``provider-empty`` – the LLM answered with no tokens and the stream carried no event.
9. ``client-abort`` – the client went away while no LLM call was waiting.
10. ``incomplete`` – the log reports envelopes dropped while the story was written, and the
    story visibly lacks some (no terminal; an ingress, a first byte or SSE events missing):
    instead of ``healthy``, ``unclassified`` or a class that rests on what is absent (6 to 8,
    and 11), which the drop may explain.
11. ``protocol-incomplete`` – an AG-UI run or a Responses stream completed without its terminal
    event, or sent events after it.
12. ``healthy`` – every request completed ok.
13. ``unclassified`` – none of the above.

A class that needs envelopes of a higher tier than the log holds cannot be ruled out; the
verdict then carries a ``caveat`` naming them, beside the class the log still supports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from cvdiag.diagnosis import client, edge, mock, protocol_rule, rules, waiting
from cvdiag.diagnosis.calls import Ref
from cvdiag.diagnosis.classes import CLASSES, DEFAULT_FIRST_TOKEN_TIMEOUT
from cvdiag.diagnosis.describe import number, text
from cvdiag.diagnosis.edge import silence_ms
from cvdiag.diagnosis.facts import KEEP, Facts, gather
from cvdiag.diagnosis.rules import Context, Finding
from cvdiag.diagnosis.vocabulary import CUT, FOUND_GONE, error_kind
from cvdiag.layers.runner import said
from cvdiag.logs.reading import Record
from cvdiag.schema.vocabulary import Tier

#: The lowest tier whose envelopes can show each class (docs/troubleshooting.md). The provider
#: classes are also named at the default tier from a caught provider exception.
NEEDS: Final[dict[str, Tier]] = {
    "cut-by-writer": Tier.DEFAULT,
    "mock-fixture-mismatch": Tier.VERBOSE,
    "provider-rate-limited": Tier.VERBOSE,
    "provider-error": Tier.VERBOSE,
    "edge-interference": Tier.DEFAULT,
    "backend-error": Tier.DEFAULT,
    "stalled-backend": Tier.VERBOSE,
    "slow-first-token": Tier.VERBOSE,
    "provider-empty": Tier.VERBOSE,
    "probe-runner-crash": Tier.DEFAULT,  # the probe's lines: its start, no exit
    "client-abort": Tier.DEFAULT,
    "incomplete": Tier.DEFAULT,
    "protocol-incomplete": Tier.DEFAULT,  # the terminal names the stream's last event
    "frontend-hydration": Tier.DEFAULT,  # the backend's completion; the page's lines
    "strict-harness": Tier.DEFAULT,
    "healthy": Tier.DEFAULT,
    "unclassified": Tier.DEFAULT,
}

_RULES: Final[tuple[tuple[str, Callable[[Context], Finding]], ...]] = (
    ("mock-fixture-mismatch", mock.mock_mismatch),
    # The mock provider's own record (its journal) names its part before the backend's view.
    ("provider-error", mock.mock_cut),
    ("slow-first-token", mock.mock_slow),
    ("provider-error", mock.never_reached),
    ("stalled-backend", mock.never_reached_waiting),
    ("provider-rate-limited", rules.rate_limited),
    ("provider-error", rules.provider_error),
    ("edge-interference", edge.edge),
    ("edge-interference", client.held),
    ("backend-error", rules.backend_error),
    # What the client saw settles what the backend alone cannot: a test that left on purpose,
    # and when the client gave up on a call still outstanding.
    ("healthy", client.left_early),
    ("stalled-backend", client.gave_up_unanswered),
    ("slow-first-token", client.gave_up_answered_later),
    ("stalled-backend", waiting.stalled),
    ("slow-first-token", waiting.slow),
    ("provider-empty", waiting.provider_empty),
    ("probe-runner-crash", client.runner_crash),
    ("client-abort", waiting.client_abort),
    ("protocol-incomplete", protocol_rule.protocol_incomplete),
    ("frontend-hydration", client.hydration),
    ("strict-harness", client.strict),
    ("healthy", waiting.healthy),
    ("healthy", client.browser_only),
)


@dataclasses.dataclass(slots=True)
class Verdict:
    test_id: str
    flap_class: str
    reason: str
    evidence: dict[str, Any]
    #: The tier the log shows (the highest any envelope of the test id needs).
    log_tier: str = "default"
    #: Classes checked before this one that the log's tier cannot show, and what that means.
    unchecked: list[str] = dataclasses.field(default_factory=list)
    caveat: str | None = None
    #: The layers read (``backend``, ``probe``, ``junit``: a runner's words), how they were
    #: joined, and the evidence facts the deciding rule named.
    layers: list[str] = dataclasses.field(default_factory=list)
    joined: str | None = None
    deciding: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "test_id": self.test_id,
            "flap_class": self.flap_class,
            "reason": self.reason,
            "log_tier": self.log_tier,
            "unchecked": self.unchecked,
            "caveat": self.caveat,
            "layers": self.layers,
            "joined": self.joined,
            "deciding": self.deciding,
            "evidence": self.evidence,
        }


def facts_shown(evidence: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """A verdict's evidence facts as ``(dotted.key, text)``, as ``classify`` and the report show
    them: nested facts flattened, ``-`` for none, an empty list as ``none`` (printed as nothing,
    ``error_events=`` read as a missing value)."""
    for key, value in evidence.items():
        if isinstance(value, Mapping):
            yield from ((f"{key}.{inner}", shown) for inner, shown in facts_shown(value))
        elif value is None:
            yield key, "-"
        elif isinstance(value, float):
            yield key, f"{value:g}"
        elif isinstance(value, list):
            yield key, ",".join(str(item) for item in value) if value else "none"
        else:
            yield key, str(value)


def classify(facts: Facts, *, first_token_timeout: float = DEFAULT_FIRST_TOKEN_TIMEOUT) -> Verdict:
    """The first class whose rule holds, with its reason, evidence and any caveat."""
    ctx = Context(facts, first_token_timeout)
    if facts.writer_cut is not None:
        return _cut_by_writer(ctx, *facts.writer_cut)
    for name, rule in _RULES:
        found = rule(ctx)
        if found.reasons:
            if name in FROM_ABSENCE and (why := _incomplete(facts)):
                return _verdict(ctx, "incomplete", why, Finding())
            return _verdict(ctx, name, "; ".join(found.reasons), found)
    if why := _incomplete(facts):
        return _verdict(ctx, "incomplete", why, Finding())
    return _verdict(ctx, "unclassified", waiting.unclassified(ctx), Finding())


#: Classes that rest on envelopes being absent (a response, a byte, an event): a drop the log
#: reports may be why they are, so a visibly incomplete story is not given them.
FROM_ABSENCE: Final = frozenset(
    {
        "stalled-backend",
        "slow-first-token",
        "provider-empty",
        "protocol-incomplete",
        "healthy",
        "unclassified",
    }
)


def _cut_by_writer(ctx: Context, count: float, ref: Ref) -> Verdict:
    """The log says its writer did not write this story's terminal: the story was cut by the
    writer (a reader too slow when the process shut down, a queue that overflowed), so no cause
    is named from what is absent, and it is not counted as failed."""
    found = Finding()
    found.add(
        f"the story was cut by the writer, not by the request: the log says {count:g} of its"
        f" envelopes, its terminal among them, were not written ({ref.summary} at"
        f" {ctx.at(ref)}); no cause is named from what is absent",
        [ref],
        not_written=int(count),
    )
    return _verdict(ctx, "cut-by-writer", found.reasons[0], found)


def _incomplete(facts: Facts) -> str:
    """How a story written while the log reports drops visibly lacks envelopes; "" when it does
    not, or when no drop is reported (then what is absent was never written)."""
    return lacking(facts) if facts.dropped else ""


def add_drops(facts: Facts, reports: Iterable[Record]) -> None:
    """Count into ``facts`` the log's ``cvdiag.queue_dropped`` reports (each has a test id of its
    own), in time order, after the test id's own envelopes. A report counts the envelopes a
    process dropped since its previous one, and comes when its pipe drains: so those written from
    the test id's first envelope up to the first one at or after its last may have held some of
    its envelopes."""
    if facts.first is None or facts.last is None:
        return
    for record in reports:
        if record.key < facts.first:
            continue
        count = number(record.envelope["metadata"].get("dropped_count"))
        facts.dropped += int(count) if count is not None and count > 0 else 0
        if len(facts.drop_refs) < KEEP:
            facts.drop_refs.append(facts.ref_of(record))
        if record.key >= facts.last:
            return


def lacking(facts: Facts) -> str:
    """How a story visibly lacks envelopes, whatever the log reports; "" when it does not."""
    terminals = facts.completion_count + facts.abort_count
    if not terminals:
        what = "it has no terminal"
    elif facts.tier >= Tier.VERBOSE and facts.ingresses < terminals:
        what = "a request's ingress is missing"
    elif facts.tier >= Tier.VERBOSE and facts.events_said and facts.first_byte is None:
        what = "its first byte is missing"
    elif facts.tier >= Tier.DEBUG and facts.sse_events < facts.events_said:
        what = f"{facts.events_said - facts.sse_events:g} of its SSE events are missing"
    else:
        return ""
    return f"the story is incomplete: {what}, no cause is named from what is absent"


def _verdict(ctx: Context, name: str, reason: str, found: Finding) -> Verdict:
    facts = ctx.facts
    before = CLASSES[: CLASSES.index(name)]
    unchecked = [c for c in before if NEEDS[c] > facts.tier]
    if name == "backend-error" and facts.tier < Tier.VERBOSE and _timeout_caught(facts):
        unchecked.append("stalled-backend")  # a caught timeout may be a call's, left waiting
    if facts.dropped and name != "cut-by-writer":  # that one says it already
        # Not a class of its own: whatever the class, the story it rests on may lack envelopes.
        reason += (
            f"; the log reports {facts.dropped} envelope{'s' if facts.dropped > 1 else ''}"
            " dropped (cvdiag.queue_dropped) while this story was written, so it may be"
            " incomplete"
        )
        found.refs.extend(facts.drop_refs)
        found.facts["dropped_envelopes"] = facts.dropped
    if facts.aborts and "silence_ms" not in found.facts:
        # Every aborted story says how long its stream had been silent, where the tier shows it.
        silence = silence_ms(ctx, facts.aborts[0])
        if silence is not None:
            found.facts["silence_ms"] = round(silence, 1)
    after = mock.backend_after(ctx, name) if "mock_request" not in found.facts else None
    if after:  # the mock's record clears it of a wait the backend's rules name
        reason += f"; {after}"
        found.facts["mock_answered_at_once"] = True
    deciding = [key for key in found.facts if key not in _CONTEXT_FACTS]
    layers, joined = _layers(ctx)
    if layers == ["backend"] and name == "client-abort":
        gone = found.facts.get("termination_cause") in FOUND_GONE
        reason += f"; {CLIENT_ABORT_SETTLED[gone]}"
    elif name == "client-abort" and ctx.client is not None and ctx.client.source == "junit":
        asked = ctx.client.requests[:1]  # the runner's words: what they say, how precisely
        reason += f"; {said(asked[0].timeout_ms if asked else None, ctx.client.words or '')}"
    return Verdict(
        facts.test_id,
        name,
        reason,
        _evidence(ctx, found),
        facts.tier.label,
        unchecked,
        _caveat(ctx, name, unchecked),
        layers,
        joined,
        deciding,
    )


#: Evidence every verdict may carry, not what decided it.
_CONTEXT_FACTS: Final = frozenset(
    {"dropped_envelopes", "silence_ms", "client", "alignment", "mock_answered_at_once"}
)
#: What a probe's lines would settle of a backend-only ``client-abort``, said in its reason:
#: why the client left (its own timeout, on purpose, the network) and, when it was only found
#: gone, when.
CLIENT_ABORT_SETTLED: Final = {
    False: "the probe's lines (or the runner's JUnit) would say why it left",
    True: (
        "a backend cannot know when its client gave up until it writes: the probe's lines"
        " (or the runner's JUnit) would say when and why it left"
    ),
}


def _layers(ctx: Context) -> tuple[list[str], str | None]:
    """The layers the verdict read, and how the client's was joined to the backend's."""
    layers = ["backend"] if ctx.facts.backend_first is not None else []
    mock = ctx.facts.join.mock
    if mock.has_mock:  # the mock provider's journal, on the backend's clock from its calls
        layers.append("aimock")
    joined = mock.offset().said() if mock.has_mock else None
    view = ctx.client
    if view is None:
        return layers, joined
    layers.append(view.source)
    if view.source == "junit":
        said = "the runner's JUnit words, on the backend's clock from its first request"
    else:
        said = view.offset.said()
    return layers, f"{said}; {joined}" if joined else said


def _caveat(ctx: Context, name: str, unchecked: list[str]) -> str | None:
    if not unchecked:
        return None
    facts = ctx.facts
    needed = min(NEEDS[c] for c in unchecked)
    hint = ""
    if name == "client-abort" and any(a.bytes_before == 0 for a in facts.aborts):
        hint = " No byte had reached the client when it left, as when a backend stalls."
    elif name == "backend-error" and "stalled-backend" in unchecked:
        hint = " The caught timeout may be an LLM call's, cut after it kept the backend waiting."
    return (
        f"the log holds only {facts.tier.label}-tier envelopes (no LLM calls, no first byte),"
        f" so {', '.join(unchecked)} could not be checked; {name} is what these envelopes"
        f" support.{hint} Log at the {needed.label} tier"
        f" (CVDIAG_{needed.label.upper()}=1) to tell them apart."
    )


def _timeout_caught(facts: Facts) -> bool:
    return any(
        error_kind(text(meta.get("exception_type"), 80)) == CUT for meta, _ in facts.error_refs
    )


def _evidence(ctx: Context, found: Finding) -> dict[str, Any]:
    f = ctx.facts
    seen: set[tuple[str, tuple[str, int]]] = set()
    refs: list[Ref] = []
    for ref in sorted(found.refs, key=lambda r: r.key):
        if (ref.where, ref.key) not in seen:
            seen.add((ref.where, ref.key))
            refs.append(ref)
    return {
        **found.facts,
        "envelope_count": f.count,
        "envelopes": [
            {
                "boundary": ref.boundary,
                "offset_ms": round(ctx.offset(ref), 3),
                "source": ref.where,
                "summary": ref.summary,
            }
            for ref in refs
        ],
    }


__all__ = [
    "CLASSES",
    "DEFAULT_FIRST_TOKEN_TIMEOUT",
    "NEEDS",
    "Facts",
    "Verdict",
    "classify",
    "gather",
]
