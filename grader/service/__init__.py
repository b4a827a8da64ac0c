"""The grading service: `python -m grader serve` puts the grader behind an HTTP front door
(docs/service.md).

    store.py     the state, through SQLAlchemy: submissions with their bytes, gradings, the queue's order
    tokens.py    students' and the instructor's tokens (only their hashes are stored); `grader tokens`
    hand_in.py   a hand-in moved atomically into submitted/<student>/<assignment>/, nbgrader's way
    intake.py    the checks on one upload (who, what, when, how much) before it is queued
    queue.py     the gradings: worker threads that grade through the engine's own Runner and slots
    views.py     what a student may see of a report, by the assignment's visibility and the deadline
    app.py       the HTTP API (/api/..., the contract the student client follows)
    pages.py     the same as server-rendered HTML: login, upload, history, queue, instructor, leaderboard
    counting.py  every hand-in kept, the one that counts (newest, or the instructor's choice); `grader hand-ins`
    guard.py     failed log-ins limited per source address
    roster.py    every student and where they stand (page, CSV, summary); `grader extend`
    regrades.py  regrade requests and their answers
    protocol.py  uvicorn's h11 protocol, answering unreadable requests in JSON (limits.py: the sizes)
    cli.py       the command lines of serve, tokens, hand-ins and extend (parsed without importing the rest)
    serve.py     serve itself: settings, the lock on the course, uvicorn
    submit_client.py  the student's side: `grader submit`, standard library only (the release copies it as it is)

May import: the core (assignment, files), sandbox/, gpu/, warm/, grading/, course/.
Used by: summary/ (the roster on the class page) and the command line.
"""
