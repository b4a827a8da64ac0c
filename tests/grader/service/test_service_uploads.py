"""What a student's upload must be, on SQLite and on PostgreSQL: the file's bytes themselves. A
form around them (curl -F, curl -d) is refused with a sentence saying how to send it, before it
is kept or costs a check."""
import uuid

import pytest

import service_server as svc

GOOD = (svc.TOY / "submissions/good.py").read_bytes()
QUOTA = 3


@pytest.fixture(scope="module", params=svc.DATABASES)
def served(request, tmp_path_factory):
    course = tmp_path_factory.mktemp(f"uploads-{request.param}") / "course"
    course.mkdir()
    db = svc.postgres_database() if request.param == "postgresql" else None
    try:
        toks = svc.tokens(course, "--add", "uma", db=db)
        server = svc.start(course, "--jobs", "1", "--checks-per-hour", str(QUOTA), db=db)
        try:
            yield server, toks
        finally:
            server.stop()
    finally:
        if db:
            svc.drop_database(db)


def multipart(data: bytes, boundary: str) -> bytes:
    """The body curl -F file=@toy.py sends."""
    return (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"toy.py\"\r\n"
            f"Content-Type: text/x-python\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()


def test_a_form_around_the_file_is_refused_with_how_to_send_it(served):
    server, toks = served
    token = toks["uma"]
    boundary = "------------------------" + uuid.uuid4().hex[:16]
    cases = {
        "curl -F": (multipart(GOOD, boundary), {"Content-Type": f"multipart/form-data; boundary={boundary}"},
                    "multipart form"),
        # curl -d @file (and --data-binary without -H) sends this type; urllib does so for any body
        "curl -d": (GOOD.replace(b"\n", b""), {"Content-Type": "application/x-www-form-urlencoded"},
                    "form-encoded body"),
        "a multipart body under another type": (multipart(GOOD, boundary), {"Content-Type": "text/plain"},
                                                "multipart form"),
    }
    for name, (body, headers, words) in cases.items():
        answer = server.request("POST", "/api/submissions?kind=check", token, body, headers)
        assert answer.status == 415, (name, answer.body)
        assert set(answer.body) == {"error"}, answer.body
        sentence = answer.body["error"]
        assert words in sentence and "--data-binary @toy.py" in sentence and "Content-Type: text/x-python" \
            in sentence and "make check" in sentence and "no check was spent" in sentence, (name, sentence)
    hand_in = server.request("POST", "/api/submissions?kind=hand-in", token, multipart(GOOD, boundary),
                             {"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert hand_in.status == 415, hand_in.body
    assert not (server.course / "submitted").exists(), "a refused hand-in must not be filed"
    assert server.request("GET", "/api/submissions", token).body == []
    assert server.request("GET", "/api/me", token).body["checks_left_this_hour"] == QUOTA
