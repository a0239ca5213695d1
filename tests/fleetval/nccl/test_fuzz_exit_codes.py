"""No silent pass, nccl-tests exit codes: any exit code with any output (a damaged, doubled or
missing `# nccl-tests version` line, binary garbage) is read without crashing, and a code no build
reports a result with is never taken as reported."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetval.nccl.exit_codes import EXIT_CODE_CONVENTIONS, exit_code_problem, read_exit_code
from tests.fuzz import fuzz_settings

pytestmark = pytest.mark.fuzz

EVER_REPORTED = frozenset().union(*(c.reported for c in EXIT_CODE_CONVENTIONS))
VERSION_LINES = st.one_of(
    st.builds(
        lambda a, b, c: f"# nccl-tests version {a}.{b}.{c}",
        st.integers(0, 99),
        st.integers(0, 99),
        st.integers(0, 99),
    ),
    st.text(max_size=40).map(lambda t: f"# nccl-tests version {t}"),
    st.just(""),
)
OUTPUTS = st.lists(st.one_of(VERSION_LINES, st.text(max_size=60)), max_size=6).map("\n".join)


@fuzz_settings()
@given(st.integers(-300, 300), OUTPUTS)
def test_any_code_and_output_is_read_and_only_result_codes_are_reported(code: int, raw: str) -> None:
    reading = read_exit_code(code, raw)
    problem = exit_code_problem(code, raw)
    assert (problem is None) == reading.reported
    if code not in EVER_REPORTED:
        assert not reading.reported and isinstance(problem, str) and problem
