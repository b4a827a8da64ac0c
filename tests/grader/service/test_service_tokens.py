"""Tokens as students type them: `--token T` on the client's command line, so no token may start
with "-", which argparse reads as an option (one token in 64 did, before)."""
from grader.service import tokens
from grader.service.store import Store


def test_no_token_starts_with_a_dash(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'course.db'}")
    try:
        made = [tokens.issue(store, f"st{i}") for i in range(600)]   # (63/64)**600: one would, 1 in 12,000 not
    finally:
        store.close()
    assert len(set(made)) == len(made)
    assert not [t for t in made if t.startswith("-")]
