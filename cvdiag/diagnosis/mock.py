"""The classifier's rule about a mock LLM provider that matched no fixture.

Agent showcases are tested against a mock LLM server (CopilotKit's aimock and the like) that
answers from recorded fixtures. A request no fixture matches is refused with an error whose body
says so: ``404 {"error": {"message": "No fixture matched", "code": "no_fixture_match"}}`` (a
strict mock may answer 503). Read as the backend's error or the provider's, it sends a person
to the backend; the fix is in the test's fixtures.
"""

from __future__ import annotations

import re
from typing import Final

from cvdiag.diagnosis.calls import Call
from cvdiag.diagnosis.describe import text
from cvdiag.diagnosis.rules import Context, Finding, _end_refs, _outcome

#: Error codes (``provider_error_code``, lowercased) a mock provider answers a request no
#: fixture matched with (docs/troubleshooting.md lists them).
MOCK_CODES: Final = frozenset(
    {"no_fixture_match", "no_fixture_matched", "no_matching_fixture", "fixture_not_found"}
)
#: The same in a message: a caught SDK exception's (the openai SDK puts the body in it), or a
#: provider error's that names no code.
_IN_TEXT: Final = re.compile(
    r"no[ _-]?fixture[ _-]?match|no[ _-]matching[ _-]fixture|fixture[ _-]not[ _-]found",
    re.IGNORECASE,
)


def is_mismatch(code: str | None, message: str | None) -> bool:
    """Whether a provider's error code, or failing that its message, says no fixture matched."""
    if code is not None and code.lower() in MOCK_CODES:
        return True
    return message is not None and _IN_TEXT.search(message[:512]) is not None


def mock_mismatch(ctx: Context) -> Finding:
    f, found = ctx.facts, Finding()
    refused = [
        c
        for c in f.calls.values()
        if c.response is not None and ctx.during(c) and is_mismatch(c.error_code, c.error_message)
    ]
    if refused and not ctx.recovered(refused):
        call = refused[-1]
        found.add(
            f"the mock LLM provider matched no fixture for LLM call {call.label}"
            f" ({_said(call)}) at {ctx.at(call.response or call.refs()[-1])}, and no call"
            f" answered ok after it: the test's fixtures lack this request, not the backend;"
            f" {_outcome(ctx)}",
            [r for c in refused for r in c.refs()] + _end_refs(ctx),
            mock_calls=len(refused),
            model=call.model,
            mock_error_code=call.error_code,
            mock_message=call.error_message,
        )
        return found
    for meta, ref in f.error_refs:
        message = text(meta.get("message_scrubbed"), 200)
        if is_mismatch(None, message):
            found.add(
                f"the backend caught {text(meta.get('exception_type'), 60)} at {ctx.at(ref)}:"
                f" the mock LLM provider matched no fixture ({message}): the test's fixtures"
                " lack this request, not the backend",
                [ref, *_end_refs(ctx)],
                exception_type=meta.get("exception_type"),
                mock_message=message,
            )
            break
    return found


def _said(call: Call) -> str:
    parts = [call.error_class or call.outcome or "?", call.error_code or ""]
    if call.error_message:
        parts.append(f'"{text(call.error_message, 120)}"')
    return " ".join(p for p in parts if p)
