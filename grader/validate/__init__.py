"""The kill matrix: every corpus entry graded and checked against what it must get.

    corpus.py  an assignment's corpus of wrong, adversarial and right submissions
    matrix.py  `python -m grader validate`: the gradings, the matrix, the time budgets

May import: the core (assignment, files), sandbox/, gpu/, warm/, grading/.
Used by: the command line (and the project's tests and benches).
"""
