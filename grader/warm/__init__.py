"""Keeping a test process up between gradings, and cleaning up after runs that die.

    hosts.py      starting a slot's warm host and handing it one grading's session
                  (the host itself is grader/grading/warm_host.py)
    leftovers.py  what a killed run leaves on the machine, and how the next run tells it apart

May import: the core (assignment, files) and sandbox/.
Used by: grading/, validate/, course/, service/ and the command line.
"""
