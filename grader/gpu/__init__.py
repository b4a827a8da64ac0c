"""The GPU around a grading: which devices there are, and what shares them.

    machines.py  the devices a run resolves to, and how many gradings go at once on each
    turns.py     turns on a GPU shared by several gradings, so that timings do not overlap
    quiet.py     quiet windows: a figure counts only if nothing else used the GPU meanwhile
    memo.py      figures measured once per GPU and shared by every grading on it
    load.py      a load generator, for checks that a busy GPU moves no score

May import: the core (assignment, files) and sandbox/.
Used by: grading/ (the plugin's timings), validate/, course/, service/ and the command line.
"""
