"""``cvdiag stats`` as text: the figures of ``Stats.to_json`` laid out for a terminal."""

from __future__ import annotations

from typing import Any, Final

PERCENTILES: Final = (50, 90, 99)


def render(report: dict[str, Any]) -> list[str]:
    """``cvdiag stats`` as text: the overall block, one block per slug, then the classes."""
    lines = [
        f"{report['envelopes']} envelopes"
        + (
            f", {report['malformed_lines']} malformed lines skipped"
            if report["malformed_lines"]
            else ""
        )
    ]
    slugs = report["slugs"]
    if len(slugs) == 1:  # the slug's block would repeat the overall one
        blocks = [(f"overall (one slug: {next(iter(slugs))})", report["overall"])]
    else:
        blocks = [("overall", report["overall"])]
        blocks += [(f"slug {slug}", group) for slug, group in slugs.items()]
    for title, group in blocks:
        lines += ["", title, *_render_group(group)]
    classes = report.get("classes")
    if classes is not None:
        lines += ["", f"classes ({classes['test_ids']} test ids)"]
        lines.append("  overall   " + _pairs(classes["overall"]))
        for slug, counts in classes["slugs"].items():
            lines.append(f"  {slug:<9} " + _pairs(counts))
    return lines


def _render_group(g: dict[str, Any]) -> list[str]:
    outcomes = "  ".join(f"{k} {v}" for k, v in g["outcomes"].items())
    aborted = g["aborted"]
    kinds = ", ".join(
        f"{kind} {v['count']} ({_percent(v['rate'])})" for kind, v in aborted["by_kind"].items()
    )
    rows = [
        ("requests", f"{g['requests']}   {outcomes}"),
        ("aborted", f"{_percent(aborted['rate'])}" + (f"   {kinds}" if kinds else "")),
        ("errors", _pairs(g["errors"]) or "none"),
        ("first byte", _percentile_text(g["time_to_first_byte_ms"])),
        ("LLM latency", _percentile_text(g["llm_latency_ms"])),
        ("total duration", _percentile_text(g["total_duration_ms"], "aborted")),
        (
            "LLM calls",
            f"{g['llm_calls']}   {_pairs(g['llm_outcomes'])}   heartbeats {g['heartbeats']}"
            + (
                f" ({g['heartbeats_per_call']:g} per call)"
                if g["heartbeats_per_call"] is not None
                else ""
            ),
        ),
        (
            "accounting",
            f"dropped {g['dropped']}   truncated {g['truncated']}"
            f"   metadata dropped {g['metadata_dropped']}",
        ),
    ]
    return [f"  {name:<15} {value}".rstrip() for name, value in rows]


def _pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def _percentile_text(p: dict[str, Any], part: str | None = None) -> str:
    """The percentiles and their count; ``part`` names a count of ``p`` that is part of ``n``
    (the aborted requests among the total durations), said when there are any."""
    if not p["count"]:
        return "-"
    approx = "" if p["exact"] else "~"
    figures = "  ".join(f"p{q} {approx}{_ms(p[f'p{q}'])}" for q in PERCENTILES)
    some = f", {p[part]} {part}" if part is not None and p.get(part) else ""
    return f"{figures}   (n={p['count']}{some})"


def _ms(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.1f}s"
    if value >= 100:
        return f"{value:.0f}ms"
    return f"{value:.1f}ms"
