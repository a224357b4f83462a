"""A request's fingerprint: a short hash that changes when what decides the model's answer does.

``cvdiag diff`` says "the prompt sent to the model changed" and ``cvdiag flakes`` separates
failing attempts on it, so it covers what a test's prompt is made of: the model, the system
prompt, the tool names and the last user message (OpenAI chat and responses, Anthropic messages,
Gemini contents). Only the hash is written, never the text: 12 hex digits of BLAKE2b, which no
one can read a prompt back from and which the scrubber leaves alone (no secret has that shape).
Earlier turns are left out on purpose: a conversation's history grows each turn, and two
attempts of the same test send the same last message whatever came before.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

#: Hex digits kept: 48 bits, where two different prompts of one test suite collide by chance
#: about once in 10^14 pairs.
DIGITS: Final = 12
#: Text kept of any one part before hashing: a pathological prompt costs a bounded hash.
_PART_MAX: Final = 64 * 1024
_TOOLS_MAX: Final = 128


def fingerprint(body: dict[str, Any], model: str) -> str:
    """The fingerprint of a parsed request body (``model`` as ``describe_request`` read it)."""
    digest = hashlib.blake2b(digest_size=DIGITS // 2)
    for part in (model, _system(body), "\x1f".join(_tool_names(body)), _last_user(body)):
        digest.update(part[:_PART_MAX].encode("utf-8", "surrogatepass"))
        digest.update(b"\x1e")  # parts apart: ("ab", "c") is not ("a", "bc")
    return digest.hexdigest()


def _text(value: object) -> str:
    """The text of a message's content: a string, or the text parts of a list of blocks."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = (_text(item) for item in value[:_TOOLS_MAX])
        return "\x1f".join(t for t in texts if t)
    if isinstance(value, dict):
        for key in ("text", "content", "parts"):
            if key in value:
                return _text(value[key])
    return ""


def _system(body: dict[str, Any]) -> str:
    # Anthropic's top-level ``system``, Gemini's ``systemInstruction``, OpenAI's ``instructions``
    # (responses) or its system and developer messages (chat).
    for key in ("system", "systemInstruction", "system_instruction", "instructions"):
        if key in body:
            return _text(body[key])
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    return "\x1f".join(
        _text(m.get("content"))
        for m in messages[:_TOOLS_MAX]
        if isinstance(m, dict) and m.get("role") in ("system", "developer")
    )


def _tool_names(body: dict[str, Any]) -> list[str]:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return []
    names: list[str] = []
    for tool in tools[:_TOOLS_MAX]:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(name, str):
            names.append(name)
        declarations = tool.get("functionDeclarations")  # Gemini: many functions per tool
        if isinstance(declarations, list):
            names += [d["name"] for d in declarations[:_TOOLS_MAX] if _named(d)]
    return sorted(names)  # the order tools are listed in does not change the prompt's meaning


def _named(value: object) -> bool:
    return isinstance(value, dict) and isinstance(value.get("name"), str)


def _last_user(body: dict[str, Any]) -> str:
    for key in ("messages", "contents", "input"):
        turns = body.get(key)
        if isinstance(turns, str):
            return turns  # a responses request's bare input
        if isinstance(turns, list):
            for turn in reversed(turns[-_TOOLS_MAX:]):
                if isinstance(turn, dict) and turn.get("role", "user") == "user":
                    return _text(turn.get("content", turn.get("parts")))
            return ""
    return _text(body.get("prompt"))  # legacy completions
