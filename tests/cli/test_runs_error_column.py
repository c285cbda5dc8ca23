"""The ERROR column of ``wf runs inspect``: a node's own error, or the failed last attempt
of a node still waiting to retry; never an old attempt's error on a node that completed."""

from __future__ import annotations

from wf.cli.output import node_error

FAILED_ATTEMPT = {"attempt": 1, "outcome": "failed", "error": "ConnectionError: flaky"}
DONE_ATTEMPT = {"attempt": 2, "outcome": "completed", "error": None}


def test_a_node_that_completed_after_a_failed_attempt_shows_no_error() -> None:
    node = {"status": "completed", "attempts": [FAILED_ATTEMPT, DONE_ATTEMPT]}
    assert node_error(node) == ""


def test_a_node_waiting_to_retry_shows_its_last_attempts_error() -> None:
    node = {"status": "submitted", "attempts": [FAILED_ATTEMPT]}
    assert node_error(node) == "ConnectionError: flaky"


def test_a_running_retry_shows_no_earlier_error() -> None:
    running = {"attempt": 2, "outcome": None, "error": None}
    assert node_error({"status": "submitted", "attempts": [FAILED_ATTEMPT, running]}) == ""


def test_a_failed_nodes_own_error_is_shown_with_its_type() -> None:
    node = {
        "status": "failed",
        "error": {"error_type": "ValueError", "message": "bad input"},
        "attempts": [FAILED_ATTEMPT],
    }
    assert node_error(node) == "ValueError: bad input"


def test_an_unserved_node_says_no_worker_takes_its_type() -> None:
    assert "no registered worker" in node_error({"status": "submitted", "unserved": True})
