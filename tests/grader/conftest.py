import json

import pytest

from toy_reports import _toy_report

collect_ignore = ["toy"]

# Fixtures that grade for real: a test that uses one is slow (see pyproject's markers), so that
# `make test-fast` leaves it out even where the fixture's cost would fall on it.
GRADING_FIXTURES = {"toy_report", "graded", "page"}


def pytest_collection_modifyitems(items):
    for item in items:
        if GRADING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def toy_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("toy-reports")

    def get(name: str) -> dict:
        return json.loads(_toy_report(name, str(out)))
    return get
