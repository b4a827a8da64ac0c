"""One grading: a submission file in, Gradescope's results.json out.

    grade_one.py        the grading's driver: checks the file, runs the session, scores, writes the report
    submission_file.py  what counts as a submission, for every way one comes in
    session_spec.py     the typed spec a grading hands its test process
    session.py          the hidden suites' pytest session, run from that spec (cold)
    warm_host.py        the same sessions, one after another, in a process kept up per slot (warm)
    pytest_plugin.py    the fixtures that reach the sandboxed submission, one rubric area per test
    workers.py          where a session's sandboxed workers come from
    state_records.py    what the test process leaves for the grading, and the one reader of it
    scoring.py          test outcomes to points
    report.py           results.json (results.schema.json), and report_reader.py to read one back
    seeds.py            gradings made again with an earlier grading's inputs

May import: the core (assignment, files), sandbox/, gpu/, warm/.
Used by: validate/, course/, service/, summary/ and the command line.
"""
