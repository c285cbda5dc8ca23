"""Test support for wf users and wf itself: virtual clock, simulation harness."""
