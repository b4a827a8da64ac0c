import json

import pytest

import service_server as svc
import shared_gradings
from toy_reports import _toy_report, built_inputs_log

collect_ignore = ["toy"]

# Fixtures that grade for real: a test that uses one is slow (see pyproject's markers), so that
# `make test-fast` leaves it out even where the fixture's cost would fall on it.
GRADING_FIXTURES = {"toy_report", "graded", "page", "corpus_matrix", "cold_reference"}


def pytest_collection_modifyitems(items):
    for item in items:
        if GRADING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        serial = item.get_closest_marker("serial")
        if serial is not None:
            if not serial.kwargs.get("reason"):
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.serial needs reason=: why it must run alone")
            item.add_marker(pytest.mark.slow)        # make test-fast runs on both cores: no serial test in it


@pytest.fixture(scope="session")
def toy_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("toy-reports")

    def get(name: str) -> dict:
        return json.loads(_toy_report(name, str(out)))
    get.built_inputs = lambda name: built_inputs_log(name, str(out))
    return get


@pytest.fixture(scope="session")
def corpus_matrix():
    """corpus_matrix(labels) -> shared_gradings.Matrix with those corpus entries' rows: make test's
    whole matrix when it is the current tree's, else those entries graded once for this session."""
    return shared_gradings.corpus_rows


@pytest.fixture(scope="session")
def cold_reference(tmp_path_factory):
    """cold_reference(seed) -> the L1 reference's report, graded cold with that seed, once per seed."""
    out = tmp_path_factory.mktemp("cold-reference")
    return lambda seed: shared_gradings.cold_reference(seed, out)


@pytest.fixture(params=svc.DATABASES)
def course_db(request, tmp_path):
    """A course folder and the service's database for it: SQLite in the folder (None), or a
    PostgreSQL database of its own, dropped after (skipped, or failed under CI, without a server)."""
    course = tmp_path / "course"
    course.mkdir()
    db = svc.postgres_database() if request.param == "postgresql" else None
    try:
        yield course, db
    finally:
        if db:
            svc.drop_database(db)
