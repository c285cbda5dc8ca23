from wf.errors import ALL_ERRORS, Overloaded, WfError


def test_error_codes_are_unique_and_stable_strings() -> None:
    codes = [cls.code for cls in ALL_ERRORS]
    rpc_codes = [cls.rpc_code for cls in ALL_ERRORS]
    assert len(set(codes)) == len(codes)
    assert len(set(rpc_codes)) == len(rpc_codes)
    assert all(-32099 <= c <= -32000 for c in rpc_codes)


def test_every_error_is_a_wf_error_with_classification() -> None:
    for cls in ALL_ERRORS:
        assert issubclass(cls, WfError)
        assert cls.fault in ("caller", "server")


def test_overloaded_carries_retry_after() -> None:
    err = Overloaded("busy", retry_after_s=2.5, depth=10)
    assert err.retryable
    assert err.to_dict()["details"] == {"retry_after_s": 2.5, "depth": 10}


def test_every_error_code_is_documented_for_operators() -> None:
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "server.md").read_text()
    for cls in ALL_ERRORS:
        assert f"| `{cls.code}` | {cls.rpc_code} |" in doc, cls.code
