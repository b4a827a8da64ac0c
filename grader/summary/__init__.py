"""What an instructor reads of a whole class once it is graded.

    page.py               `python -m grader summary`: one static page on how the class did,
                          with the grading service's roster where the course has one
    similarity.py         which hand-ins are one file handed in several times
    similarity_report.py  `python -m grader similarity`: that evidence as JSON, CSV and a page

May import: every other package (it reads the course folder and the service's database).
Used by: the command line.
"""
