"""Two stories compared: the first point where they split, then every other difference beyond
noise. Points are matched by their structural keys (``story.Point.key``), never by ids; timings
differ in every pair of runs, so they count only past a threshold the user sets."""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from cvdiag.compare.story import Point, Story
from cvdiag.diagnosis.describe import ms

#: Timings further apart than this (ms) are a difference, unless the user says otherwise.
DEFAULT_THRESHOLD_MS: Final = 1000.0
#: Differences listed at most (a run away story differs everywhere).
SHOWN_MAX: Final = 50


@dataclasses.dataclass(slots=True)
class Difference:
    at_ms: float
    where: str
    what: str
    a: Any
    b: Any

    def to_json(self) -> dict[str, Any]:
        return {"at_ms": round(self.at_ms, 1), "where": self.where, "what": self.what,
                "a": self.a, "b": self.b}  # fmt: skip


@dataclasses.dataclass(slots=True)
class Comparison:
    a: Story
    b: Story
    #: The labels of the beginnings both stories reached, in order, before the split.
    shared: list[str]
    split: str | None
    differences: list[Difference]
    #: When the first split happened in each story (ms from its first envelope; None where the
    #: story has no such point): where a waterfall marks it.
    split_at: tuple[float | None, float | None] = (None, None)

    @property
    def same(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        return {
            "same": self.same,
            "a": {"test_id": self.a.test_id, "flap_class": self.a.flap_class},
            "b": {"test_id": self.b.test_id, "flap_class": self.b.flap_class},
            "shared": self.shared,
            "first_split": self.split,
            "differences": [d.to_json() for d in self.differences[:SHOWN_MAX]],
            "possible_loops": {"a": _loops(self.a), "b": _loops(self.b)},
        }


def compare(a: Story, b: Story, *, threshold_ms: float = DEFAULT_THRESHOLD_MS) -> Comparison:
    """``a`` and ``b`` (finished) compared; ``a`` is the one to read as the reference (a pass)."""
    pairs = _aligned(a.points, b.points)
    differences: list[Difference] = []
    if a.flap_class != b.flap_class:
        differences.append(Difference(0.0, "story", "class", a.flap_class, b.flap_class))
    shared: list[str] = []
    split: str | None = None
    split_at: tuple[float | None, float | None] = (None, None)
    for at, left, right in pairs:
        found = _differences(at, left, right, threshold_ms)
        if found and split is None:
            split = _split_sentence(left, right, found, a, b)
            split_at = (_at(left), _at(right))
        if not found and split is None and left is not None and not left.end:
            shared.append(left.label)
        differences += found
    if split is None and differences:
        split = f"the class differs: {a.flap_class} against {b.flap_class}"
    return Comparison(a, b, shared, split, differences, split_at)


def _at(point: Point | None) -> float | None:
    return None if point is None else point.at_ms


def _shown(key: str, one: Any, two: Any) -> tuple[Any, Any]:
    """A difference's two values as shown: SSE events by the first position where their names
    differ (``#3 TEXT_MESSAGE_CONTENT`` against ``#3 RUN_ERROR``, or ``-`` past one's end)."""
    if key != "event_names":
        return one, two
    names_one = one if isinstance(one, list) else []
    names_two = two if isinstance(two, list) else []
    at = next(
        (i for i, pair in enumerate(zip(names_one, names_two, strict=False)) if pair[0] != pair[1]),
        min(len(names_one), len(names_two)),
    )
    return (
        f"#{at} {names_one[at]}" if at < len(names_one) else None,
        f"#{at} {names_two[at]}" if at < len(names_two) else None,
    )


def _same(one: object, two: object) -> bool:
    """Equal, a NaN included (a hand-made story's value: JSON has none)."""
    return one == two or (one != one and two != two)


def _aligned(one: list[Point], two: list[Point]) -> list[tuple[float, Point | None, Point | None]]:
    """The points of both stories in the order the stories tell them, matched by key.

    Walked side by side rather than sorted by time: a point only one story has comes where that
    story has it (a second LLM call before its request's end), even when the other story had
    already ended by then on the clock. Where the two orders cross, the earlier point goes first.
    """
    in_two = {p.key: p for p in two}
    in_one = {p.key: p for p in one}
    done: set[str] = set()
    pairs: list[tuple[float, Point | None, Point | None]] = []
    i = j = 0
    while i < len(one) or j < len(two):
        left = one[i] if i < len(one) else None
        right = two[j] if j < len(two) else None
        if left is not None and left.key in done:
            i += 1
        elif right is not None and right.key in done:
            j += 1
        elif left is not None and (left.key not in in_two or right is None):
            pairs.append((left.at_ms, left, in_two.get(left.key)))
            done.add(left.key)
            i += 1
        elif right is not None and (right.key not in in_one or left is None):
            pairs.append((right.at_ms, in_one.get(right.key), right))
            done.add(right.key)
            j += 1
        elif left is not None and right is not None:
            first = left if left.key == right.key or left.at_ms <= right.at_ms else right
            mate_one, mate_two = in_one[first.key], in_two[first.key]
            pairs.append((min(mate_one.at_ms, mate_two.at_ms), mate_one, mate_two))
            done.add(first.key)
    return pairs


def _differences(
    at: float, left: Point | None, right: Point | None, threshold_ms: float
) -> list[Difference]:
    if left is None or right is None:
        there = left or right
        assert there is not None
        return [Difference(at, there.key, "only in one", left is not None, right is not None)]
    found = [
        Difference(at, left.key, key, *_shown(key, left.facts.get(key), right.facts.get(key)))
        for key in dict.fromkeys([*left.facts, *right.facts])
        if not _same(left.facts.get(key), right.facts.get(key))
    ]
    for key in dict.fromkeys([*left.timings, *right.timings]):
        one, two = left.timings.get(key), right.timings.get(key)
        beyond = one is None or two is None or abs(one - two) > threshold_ms
        if beyond and not _same(one, two):
            found.append(Difference(at, left.key, key, one, two))
    return found


def _side(point: Point | None, story: Story) -> str:
    """What one run's point says, in a few words."""
    if point is None:
        return "never got there"
    facts = point.facts
    if point.kind == "llm" and point.end:
        if facts.get("outcome") == "no answer":
            beats = f" after {point.heartbeats} heartbeat(s)" if point.heartbeats else ""
            last = point.waited_ms if point.waited_ms is not None else point.at_ms
            return f"the call was still waiting at +{ms(last)}{beats}"
        first = point.timings.get("first_token_ms")
        said = f"first token at +{ms(first)}, " if first is not None else ""
        error = f" ({facts['error_class']})" if facts.get("error_class") else ""
        tokens = facts.get("response_token_count")
        count = f", {tokens} tokens" if tokens is not None else ""
        quiet = ""
        if first is None and point.heartbeats:  # it waited, and said so, before it ended
            quiet = f" with no first token after {point.heartbeats} heartbeat(s)"
        return f"{said}ended {facts.get('outcome')}{error} at +{ms(point.at_ms)}{quiet}{count}"
    if point.kind == "request" and point.end:
        if facts.get("terminal") == "none":
            return f"had no terminal when the log ended (+{ms(point.at_ms)})"
        if facts.get("terminal") == "aborted":
            cause = facts.get("termination_cause") or facts.get("termination_kind")
            return f"aborted ({cause}) at +{ms(point.at_ms)} after {facts.get('events', 0)} events"
        return (
            f"HTTP {facts.get('http_status')} complete at +{ms(point.at_ms)}"
            f" with {facts.get('events', 0)} events"
        )
    if point.kind == "client":
        timeout = facts.get("client_timeout_ms")
        own = f" (its own {ms(timeout)} timeout)" if timeout is not None else ""
        return f"client's side ended {facts.get('client_end')}{own} at +{ms(point.at_ms)}"
    if point.end:
        return f"ended {facts.get('outcome')} at +{ms(point.at_ms)}"
    return f"began at +{ms(point.at_ms)}"


def _split_sentence(
    left: Point | None, right: Point | None, found: list[Difference], a: Story, b: Story
) -> str:
    there = left or right
    assert there is not None
    names = {d.what for d in found}
    if "request_fingerprint" in names:
        return f"at {there.label}: the prompt sent to the model changed"
    if left is None or right is None:
        gone = "the second" if right is None else "the first"
        return f"{gone} run never reached {there.label} ({'end' if there.end else 'beginning'})"
    first = found[0]
    if there.end:
        sentence = f"at {there.label}: the first run's {_side(left, a)};"
        sentence += f" the second run's {_side(right, b)}"
    elif first.what == "edge_headers":  # a beginning differs in how it was asked
        sentence = f"at {there.label}: the edge differs: {_headers(first.a)}"
        sentence += f" against {_headers(first.b)}"
    else:
        sentence = f"at {there.label}: {first.what} {first.a} against {first.b}"
    left_b = b.client_left_ms if a.client_left_ms is None else None
    if left_b is not None:
        sentence += f"; the client left at +{ms(left_b)}"
    return sentence


def _headers(value: Any) -> str:
    if not isinstance(value, dict) or not value:
        return "no edge header"
    return ", ".join(f"{k}: {v}" for k, v in value.items())


def _loops(story: Story) -> list[dict[str, Any]]:
    return [{"request_fingerprint": sent, "calls": n} for sent, n in story.loops()]
