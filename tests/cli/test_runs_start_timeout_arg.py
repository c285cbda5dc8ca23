"""``wf runs start --wait --timeout S`` takes a finite number of seconds, 0 or more; anything
else is a usage error (exit 2) before any server is called."""

from __future__ import annotations

import pytest

from wf.cli.main import main


@pytest.mark.parametrize("value", ["-1", "-0.5", "nan", "inf", "soon"])
def test_a_timeout_that_is_negative_or_not_a_finite_number_is_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["runs", "start", "d.default", "--wait", f"--timeout={value}"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--server", "http://127.0.0.1:9"])
    assert exit_info.value.code == 2
    assert "--timeout" in capsys.readouterr().err
