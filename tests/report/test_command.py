"""``cvdiag report`` as a user runs it: its outputs (a file, stdout, the default name), what it
draws (``--all``, ``--test-id``, ``--max-drawn``), and its failures, each one line and an exit
code, never a traceback, never a half-written page left behind."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import cvdiag
from tests.support.report import Page, envelope, write
from tests.support.stories import STORIES, write_log


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """One test id of each class: five failed, a healthy one, an unclassified one."""
    path = tmp_path / "app.log"
    write_log(path, [story() for story in STORIES.values()])
    return path


FAILED = {name for name in STORIES if name != "healthy"}


def _ids(page: Page) -> dict[str, str]:
    """Test id → class, of the test ids drawn."""
    return {test_id: page.section_of(test_id).flap_class for test_id in page.drawn}


def _one_error_line(stderr: str, *starts: str) -> None:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(starts), stderr
    assert "Traceback" not in stderr


def test_the_page_goes_to_the_default_name_and_draws_the_failed_ones(
    log: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cvdiag", "report", str(log)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    page = Page((tmp_path / "cvdiag-report.html").read_text(encoding="utf-8"))
    assert len(page.rows) == len(STORIES)
    assert set(_ids(page).values()) == FAILED
    assert "cvdiag-report.html" in done.stderr
    assert [name for name in os.listdir(tmp_path) if name.startswith(".")] == []


def test_dash_writes_the_page_to_stdout(log: Path) -> None:
    done = cvdiag("report", "-o", "-", str(log))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    page = Page(done.stdout)
    assert set(_ids(page).values()) == FAILED


def test_all_draws_the_healthy_ones_too_and_test_id_only_those(log: Path) -> None:
    every = Page(cvdiag("report", "-o", "-", "--all", str(log)).stdout)
    assert set(_ids(every).values()) == set(STORIES)
    only = cvdiag("report", "-o", "-", "--test-id", "t-healthy", "--test-id", "t-edge", str(log))
    assert only.returncode == 0, only.stderr
    page = Page(only.stdout)
    assert set(page.rows) == {"t-healthy", "t-edge"}
    assert _ids(page) == {"t-edge": "edge-interference"}  # healthy: listed, not drawn


def test_max_drawn_bounds_what_is_drawn_and_says_so(log: Path) -> None:
    none = cvdiag("report", "-o", "-", "--max-drawn", "0", str(log))
    assert none.returncode == 0, none.stderr
    page = Page(none.stdout)
    assert len(page.rows) == len(STORIES)
    assert page.sections == {}
    assert f"{len(FAILED)} test id(s) listed but not drawn" in none.stdout
    two = Page(cvdiag("report", "-o", "-", "--max-drawn", "2", str(log)).stdout)
    assert len(two.sections) == 2


@pytest.mark.parametrize("value", ["-1", "x", ""])
def test_a_bad_max_drawn_is_a_usage_error(log: Path, value: str) -> None:
    done = cvdiag("report", "-o", "-", "--max-drawn", value, str(log))
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr


def test_a_missing_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = cvdiag("report", "-o", str(tmp_path / "r.html"), str(tmp_path / "missing.log"))
    assert done.returncode == 2
    _one_error_line(done.stderr, "cvdiag: error: report:")
    assert "missing.log" in done.stderr
    assert not (tmp_path / "r.html").exists()


def test_a_log_without_an_envelope_is_exit_1_and_writes_nothing(tmp_path: Path) -> None:
    plain = tmp_path / "plain.log"
    plain.write_text("INFO nothing here\nCVDIAG not json\n")
    done = cvdiag("report", "-o", str(tmp_path / "r.html"), str(plain))
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith("cvdiag: error: report: no CVDIAG envelope")
    assert not (tmp_path / "r.html").exists()


def test_an_empty_stdin_is_exit_1(tmp_path: Path) -> None:
    done = cvdiag("report", "-o", "-", "-", stdin=b"")
    assert done.returncode == 1
    _one_error_line(done.stderr, "cvdiag: error: report: no CVDIAG envelope")
    assert done.stdout == ""


def test_a_folder_that_does_not_exist_is_one_line_and_exit_2(log: Path, tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "r.html"
    done = cvdiag("report", "-o", str(target), str(log))
    assert done.returncode == 2
    _one_error_line(done.stderr, f"cvdiag: error: report: cannot write {target}")
    assert not (tmp_path / "no").exists()


def test_a_folder_as_the_output_is_one_line_and_exit_2(log: Path, tmp_path: Path) -> None:
    done = cvdiag("report", "-o", str(tmp_path), str(log))
    assert done.returncode == 2
    _one_error_line(done.stderr, "cvdiag: error: report: cannot write")
    assert sorted(os.listdir(tmp_path)) == ["app.log"]  # no temporary file left


def test_a_full_device_is_written_into_never_replaced(log: Path, tmp_path: Path) -> None:
    """A device as the output (here a /dev/full of our own, made beside the log) is written
    into: its error is the command's one line, and the device is still there, not a page."""
    full = tmp_path / "full"
    try:
        os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except (PermissionError, AttributeError):
        pytest.skip("making a device needs root")
    done = cvdiag("report", "-o", str(full), str(log))
    assert done.returncode == 2
    _one_error_line(done.stderr, f"cvdiag: error: report: cannot write {full}: No space left")
    assert stat.S_ISCHR(os.stat(full).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["app.log", "full"]


def test_a_full_stdout_is_one_line_and_exit_2(log: Path) -> None:
    with open("/dev/full", "wb") as full:  # opened, never replaced: stdout only
        done = subprocess.run(
            [sys.executable, "-m", "cvdiag", "report", "-o", "-", str(log)],
            stdout=full,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            timeout=60,
            text=True,
        )
    assert done.returncode == 2
    _one_error_line(done.stderr, "cvdiag: error: report: cannot write output: no space left")


def test_a_symbolic_links_target_is_replaced_not_the_link(log: Path, tmp_path: Path) -> None:
    target = tmp_path / "pages" / "real.html"
    target.parent.mkdir()
    link = tmp_path / "link.html"
    link.symlink_to(target)
    done = cvdiag("report", "-o", str(link), str(log))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink()
    assert "<!doctype html>" in target.read_text(encoding="utf-8")


def test_an_undecodable_file_name_is_shown_escaped(tmp_path: Path) -> None:
    name = os.fsdecode(b"odd-\xff-name.log")
    path = write(
        tmp_path / name,
        [envelope("x", "backend.response.complete", 0, "c", "r", {"http_status": 500})],
    )
    done = cvdiag("report", "-o", "-", str(path))
    assert done.returncode == 0, done.stderr
    assert "odd-\\udcff-name.log" in done.stdout
