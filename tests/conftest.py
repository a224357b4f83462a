from __future__ import annotations

import compileall
import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import cvdiag
from cvdiag.pytest_plugin import EVENTS_KEY

pytest_plugins = ["pytester"]

# Reference data vendored from the CVDIAG v1 publication (see tests/data/README.md): the suite
# reads nothing outside the repository, so a fresh clone in an empty folder passes.
REFERENCE = Path(__file__).resolve().parent / "data"
#: CVDIAG v1's ``termination_kind`` values: the only ones cvdiag may write.
V1_TERMINATION_KINDS = frozenset({"rst", "timeout", "chunk_error", "fin_premature"})


# Hypothesis judges by what it finds, never by the clock: its deadline and its "input generation is
# slow" health check measure wall-clock time, which four workers on a busy 2-core machine stretch
# (a flake, not a finding). Every example and every assertion is unchanged.
settings.register_profile("cvdiag", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cvdiag")


# --- running in parallel, and the quick subset ----------------------------------------------
#
# A plain ``pytest`` runs on WORKERS pytest-xdist workers: the suite waits far more than it
# computes (real servers, subprocesses, sleeps), so more workers than this 2-core machine has
# cores pays off; 4 was measured best (docs/architecture.md, "Tests"). ``--dist loadfile``: each
# module runs whole on one worker, so that its module fixtures (a log written by real servers,
# a fake provider, a demo run) are paid for once, not once per worker. Set here rather than in
# pyproject.toml's addopts so that ``pytest -p no:xdist`` (or a venv without pytest-xdist)
# still works; ``-n 0`` or any ``-n N`` / ``--dist`` given wins.
WORKERS = 4
#: ``pytest -m "not slow"`` runs on one worker per core instead: the quick subset starts no
#: server and waits on nothing, so it is CPU-bound, and every worker collects the whole suite
#: (about 4 s here) before it runs a test. On 2 cores: 17 s on 2 workers, 18 s on 4.
QUICK_WORKERS = max(1, min(WORKERS, os.cpu_count() or 1))

#: What ``pytest -m "not slow"`` (the edit-test loop) leaves out: whole modules that start real
#: servers or subprocesses, write big logs, run the docs or the examples; then single tests
#: (by node id, without parameters) that take more than about half a second. The tests marked
#: ``reliability`` are slow too. Everything still runs in a plain ``pytest``.
SLOW = (
    "tests/reliability/",
    "tests/scopes/test_until_response.py",
    "tests/logs/test_fastcheck.py",
    "tests/asgi/test_async_libraries.py",
    "tests/project/test_benchmarks.py",
    "tests/sinks/test_blocking_detector.py",  # a process per case, blockbuster in it
    "tests/core/test_cancel_vocabulary.py",
    "tests/cli/test_big_logs.py",
    "tests/cli/test_causes_real.py",
    "tests/cli/test_commands.py",
    "tests/cli/test_layers.py",
    "tests/cli/test_demo.py",
    "tests/cli/test_first_hour.py",
    "tests/cli/test_gone_real.py",
    "tests/cli/test_long_lines.py",
    "tests/cli/test_parallel.py",
    "tests/cli/test_real.py",
    "tests/cli/test_shapes_real.py",
    "tests/cli/test_silence_real.py",
    "tests/cli/test_spill.py",
    "tests/cli/test_tail_live.py",
    "tests/cli/test_truths.py",
    "tests/cli/test_usability.py",
    "tests/project/test_docs_snippets.py",
    "tests/asgi/test_error_order.py",
    "tests/project/test_examples.py",
    "tests/project/test_examples_offline.py",
    "tests/project/test_fake_provider.py",
    "tests/e2e/test_frameworks.py",
    "tests/e2e/test_langgraph_server.py",  # `langgraph dev` processes
    "tests/e2e/test_job_queues.py",  # redis-server, a Celery and an arq worker, uvicorn
    "tests/sinks/test_host_stdout.py",  # a process per case, Celery's LoggingProxy in it
    "tests/sinks/test_sinks.py::test_a_tail_lost_at_shutdown_is_said_in_the_log_within_the_bound",
    "tests/outbound/test_httpx.py",
    "tests/providers/test_finish_reasons.py",
    "tests/core/test_log_scrub_uvicorn.py",
    "tests/asgi/test_last_byte.py",
    "tests/asgi/test_e2e.py",
    "tests/e2e/test_aimock_real.py",  # the real aimock from npm, a node process
    "tests/e2e/test_mock_fixture_real.py",
    "tests/e2e/test_nginx_real.py",  # real nginx in front of uvicorn
    "tests/otel/test_bridge.py",
    "tests/otel/test_startup_line.py",  # a fresh process per case
    "tests/otel/test_streaming_metrics.py",  # the fake provider on uvicorn
    "tests/sinks/test_process_lifecycle.py",
    "tests/pytest_plugin/test_backend.py",  # a backend of its own: uvicorn in a subprocess
    "tests/pytest_plugin/test_runs_real.py",  # the same backend, two sessions in one folder
    "tests/cli/test_help_examples.py",  # a real backend, then every example of every --help
    "tests/pytest_plugin/test_test_id.py",  # inner pytest sessions, a real server
    "tests/pytest_plugin/test_probe_log.py",  # inner pytest sessions, xdist workers
    "tests/probe/test_real_backend.py",  # uvicorn in a process of its own
    "tests/e2e/test_protocol_real.py",
    "tests/report/test_command.py",
    "tests/report/test_junit.py",  # a real server writes the backend's log
    "tests/report/test_hostile.py",
    "tests/report/test_browser.py",  # real servers, then the pages in headless Chromium
    "tests/report/test_browser_runs.py",  # a real server's log, then the page in Chromium
    "tests/probe/test_playwright.py",  # npm install once, then a real Playwright run in Chromium
    # issue 45 end to end: uvicorn, the fake provider and nginx as processes, a pytest killed
    "tests/e2e/test_client_layer_pytest.py",
    "tests/scrubbing/test_doors.py",
    "tests/sinks/test_shared_log.py",  # four worker processes under gunicorn and uvicorn, per case
    "tests/compare/test_diff_real.py",  # a real backend and fake provider, then the command
    "tests/compare/test_fingerprint.py",  # real SDKs against the fake provider
    "tests/compare/test_flakes_real.py",
    "tests/compare/test_hostile.py",  # the command per case
    "tests/compare/test_report.py",
    "tests/compare/test_flakes_folded.py::test_failures_first_tokens_forgotten_along_the_way_change_nothing",
    "tests/compare/test_flakes_folded.py::test_a_story_read_untimed_tells_flakes_the_same",
    "tests/showcase_integration/test_showcase_server.py",
    "tests/e2e/test_stories.py",
    "tests/outbound/test_stream_outlives_request.py",
    "tests/scopes/test_stream_silence.py",
    "tests/cli/test_support_runner.py",  # each command twice: forked and as a new interpreter
    "tests/pipeline/test_template.py",
    "tests/logs/test_search.py::test_arbitrary_bytes_and_needles",
    "tests/logs/test_search.py::test_the_search_finds_what_a_line_split_finds",
    "tests/logs/test_search.py::test_candidate_lines_take_the_same_lines_by_either_road",
    "tests/logs/test_validate.py::test_the_validator_agrees_with_jsonschema",
    "tests/pipeline/test_envelope.py::test_every_envelope_is_within_its_cap_and_valid",
    "tests/scopes/test_heartbeat.py::test_ten_thousand_outstanding_calls_cost_no_task_and_no_thread",
    "tests/asgi/test_hostile.py::test_raw_requests_over_uvicorn",
    "tests/pytest_plugin/test_report.py::test_under_xdist_the_workers_make_one_page",
    "tests/project/test_quality.py",  # mypy and ruff over the whole tree
    "tests/report/test_page.py::test_every_row_and_section_stays_within_its_maximum_at_the_widest",
    "tests/scrubbing/test_corpus.py::test_converting_a_huge_object_to_text_is_bounded",
    "tests/scrubbing/test_cut.py::test_an_over_long_test_id_ending_in_a_token_leaks_nothing",
    "tests/scrubbing/test_cut.py::test_a_long_test_id_still_joins",
    "tests/core/test_settings.py::test_an_unrecognised_value_is_reported_once",
    "tests/sinks/test_sinks.py::test_a_slow_reader_never_blocks_the_loop_nor_breaks_the_hosts_prints",
    "tests/asgi/test_sse.py::test_condensing_keeps_counts_and_sizes_exact",
    "tests/asgi/test_sse.py::test_incremental_readers_match_the_reference",
)


#: The request path's tests (``-m request_path``): what the middleware, the context helpers, the
#: pipeline and the sinks do inside a host, the code the compiled wheel compiles or runs beside
#: it, quick or slow, real servers included. CI runs them against each interpreter's compiled
#: wheel, with the quick subset of everything else (``-m "request_path or not slow"``); the
#: reading side (the CLI, the report, the diagnosis) is pure Python on every build, and its slow
#: tests run once, in the Quickstart's whole suite.
REQUEST_PATH = (
    "tests/asgi/",
    "tests/core/",
    "tests/otel/",
    "tests/outbound/",
    "tests/pipeline/",
    "tests/providers/",
    "tests/reliability/",
    "tests/scopes/",
    "tests/showcase_integration/",
    "tests/sinks/",
    "tests/e2e/test_stories.py",  # the stories real servers write, every shape of stream
    "tests/e2e/test_protocol_real.py",
    "tests/e2e/test_nginx_real.py",  # the middleware behind a real proxy
)


def pytest_configure(config: pytest.Config) -> None:
    """cvdiag's bytecode compiled once, before any worker starts, as installing a package compiles
    it: the suite starts hundreds of processes that import cvdiag (the CLI, servers, examples),
    and where ``PYTHONDONTWRITEBYTECODE`` is set (CI's machine) each would compile it again, 7
    to 9 s of the suite's time on 2 cores. Into ``cvdiag/**/__pycache__`` (ignored by git), as
    Python itself writes them where that variable is not set."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        # A file it cannot write (a read-only checkout) is skipped: its importers compile it.
        compileall.compile_dir(Path(cvdiag.__file__).parent, quiet=2)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """The cyclic garbage collector paused while the suite is collected, and what collecting
    made frozen (``gc.freeze``). Collecting imports every test module and what they import (the
    LLM SDKs' thousands of models, hypothesis); the collector, started by those allocations,
    walked the ever larger heap again and again: 30 % of a worker's collection. Nothing made then
    is garbage a test could look for, and frozen, the later collections (a test's own, or
    cvdiag's ``gc.collect()`` for a dropped stream) no longer walk it."""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.enable()


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``-n WORKERS --dist loadfile`` unless the command line says otherwise (runs before
    pytest-xdist's own hook, which turns ``-n`` into workers)."""
    if not config.pluginmanager.has_plugin("xdist") or "PYTEST_XDIST_WORKER" in os.environ:
        return
    if config.option.numprocesses is None and not config.option.collectonly:
        quick = config.option.markexpr.replace(" ", "") == "notslow"
        config.option.numprocesses = QUICK_WORKERS if quick else WORKERS
        if config.option.dist == "no":
            config.option.dist = "loadfile"
            # pytest-xdist would hand modules out by their number of tests; ours go longest
            # first (``pytest_collection_modifyitems``), and a count of tests is not a length.
            config.option.loadscopereorder = False


#: The modules that take longest, longest first (measured with 4 workers in a fresh clone). Under
#: ``--dist loadfile`` each worker takes the next module as it finishes one, in collection order;
#: a long module taken last keeps one worker busy while the others idle at the end of the run.
LONGEST = (
    "tests/project/test_docs_snippets.py",
    "tests/project/test_benchmarks.py",
    "tests/e2e/test_stories.py",
    "tests/sinks/test_shared_log.py",  # about 40 s on a quiet machine: worker processes per case
    "tests/report/test_hostile.py",
    "tests/report/test_browser.py",
    "tests/project/test_examples_offline.py",
)


def _module_rank(item: pytest.Item) -> int:
    """Where ``item``'s module runs: the longest first, in their order; then the rest of the
    slow modules; then the quick ones, which fill the gaps at the end."""
    path = item.nodeid.split("::")[0]
    if path in LONGEST:
        return LONGEST.index(path)
    return len(LONGEST) + (0 if _slow_module(path) else 1)


def _slow_module(path: str) -> bool:
    """Whether the module at ``path`` is slow as a whole (an entry of ``SLOW`` naming a test
    holds ``::``, so it never starts a module's path)."""
    return any(path.startswith(slow) for slow in SLOW)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Long modules first (a stable sort: each module's tests keep their order, and every
    pytest-xdist worker, which collects on its own, gets the same order)."""
    items.sort(key=_module_rank)


def pytest_itemcollected(item: pytest.Item) -> None:
    test = item.nodeid.split("[")[0]
    if item.nodeid.startswith(REQUEST_PATH):
        item.add_marker(pytest.mark.request_path)
    if (
        item.get_closest_marker("reliability")
        or _slow_module(item.nodeid.split("::")[0])
        or test in SLOW
    ):
        item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _wire_stays_v1(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test that captures (the plugin's ``cvdiag_events``, which users also get) holds the
    wire to CVDIAG v1's termination kinds, and to one type per field: every duration is whole
    milliseconds."""
    yield
    events = request.node.stash.get(EVENTS_KEY, None)
    if events is None:
        return
    for envelope in list(events.envelopes):
        metadata = envelope.get("metadata") or {}
        kind = metadata.get("termination_kind")
        assert kind is None or kind in V1_TERMINATION_KINDS, envelope
        for key, value in metadata.items():
            if key.endswith("_ms") or key.startswith("delta_ms"):
                assert value is None or type(value) is int, (key, envelope)


@pytest.fixture
def reference_dir() -> Path:
    if not REFERENCE.is_dir():
        pytest.fail(f"vendored reference data not found at {REFERENCE}")
    return REFERENCE


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line naming the framework recipes (tests/e2e/test_frameworks.py and
    tests/e2e/test_langgraph_server.py) left out, and why; only when this run skipped some of them
    (a run that did not select them left nothing out)."""
    skipped = terminalreporter.stats.get("skipped", [])
    recipes = ("tests/e2e/test_frameworks.py", "tests/e2e/test_langgraph_server.py")
    if not any(getattr(r, "nodeid", "").startswith(recipes) for r in skipped):
        return
    from tests.e2e.test_frameworks import RECIPES, missing

    left_out = {name: missing(name) for name in RECIPES}
    absent = sorted({dist for dists in left_out.values() for dist in dists})
    if absent:
        names = ", ".join(name for name, dists in left_out.items() if dists)
        terminalreporter.write_line(
            f"frameworks recipes skipped: {names} ({', '.join(absent)} not installed;"
            " pip install -e '.[frameworks]')"
        )
