"""Validate envelopes against the published v1 schema and cvdiag's packaged one."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator

from cvdiag.schema.vocabulary import packaged_schema
from tests.conftest import REFERENCE

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


@cache
def _validators() -> tuple[Draft202012Validator, Draft202012Validator]:
    reference = json.loads((REFERENCE / "cvdiag-schema-v1.json").read_text())
    return Draft202012Validator(reference), Draft202012Validator(packaged_schema())


def closed_metadata_errors(envelope: Mapping[str, Any]) -> list[str]:
    keys = packaged_schema()["$defs"]["boundary_metadata_keys"].get(envelope["boundary"], [])
    return [f"metadata key {k!r} not allowed" for k in envelope["metadata"] if k not in keys]


def assert_valid(envelope: Mapping[str, Any]) -> None:
    """Valid against cvdiag/schema/schema.json always, and against the published v1 schema whenever
    the test id is a UUIDv7 (the documented extension admits sanitized join keys)."""
    reference, packaged = _validators()
    errors = [e.message for e in packaged.iter_errors(envelope)]
    if UUID7.match(envelope.get("test_id", "")):
        errors += [f"v1: {e.message}" for e in reference.iter_errors(envelope)]
    errors += closed_metadata_errors(envelope)
    assert not errors, (errors, envelope)
