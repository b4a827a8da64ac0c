"""A class: the course folder and everything that grades it as a whole.

    folder.py      a course folder in nbgrader's layout, and where each student stands
    lock.py        one grade-all per course at a time
    batch.py       grading every hand-in of a course locally, then feedback, grades and publishing
    cluster.py     the same gradings as Slurm or submitit jobs
    grade_all.py   `python -m grader grade-all`, choosing between the two
    gradebook.py   nbgrader's gradebook and grades.csv
    feedback.py    a student's feedback.md, from the report's student-facing parts

May import: the core (assignment, files), sandbox/, gpu/, warm/, grading/.
Used by: service/, summary/ and the command line.
"""
