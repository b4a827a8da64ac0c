import json

import pytest

from toy_reports import _toy_report

collect_ignore = ["toy"]


@pytest.fixture(scope="session")
def toy_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("toy-reports")

    def get(name: str) -> dict:
        return json.loads(_toy_report(name, str(out)))
    return get
