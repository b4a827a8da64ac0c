# Paged-KV autograder. `make help` lists the targets.
PYTHON     ?= python3
VENV       ?= .venv
PY         := $(VENV)/bin/python
ASSIGNMENT ?= assignment/l1_paged_kv_write
SUBMISSION ?= reference/l1_paged_kv_write.py
REPORT     ?= build/report.json
DEVICE     ?= auto
COURSE     ?=
THRESHOLD  ?=
STUDENTS   ?=
JOBS       ?=
EXECUTOR   ?= local
SLURM      ?=

.PHONY: help venv grade test test-fast template release validate grade-all demo-class copy-class summary similarity gradescope bench clean
help:
	@echo "make grade [SUBMISSION=file.py] [REPORT=out.json] [DEVICE=auto|cpu|cuda]  grade one submission"
	@echo "make test                      the project's own tests (CPU interpreter when no GPU)"
	@echo "make test-fast                 the same without the tests that grade for real (under a minute)"
	@echo "make template                  regenerate student_template/ from the reference (nbgrader)"
	@echo "make release                   the student bundle in build/release/"
	@echo "make validate [JOBS=n]         grade the reference and the wrong/adversarial/right corpus, print the kill matrix"
	@echo "make grade-all COURSE=dir      grade a class in nbgrader's layout [DEVICE=..] [JOBS=n] [EXECUTOR=local|slurm|submitit-local] [SLURM='--partition gpu ...']"
	@echo "make demo-class COURSE=dir     a class to try grade-all on, from the corpus (then --check it)"
	@echo "make summary COURSE=dir        the class page with plots, in COURSE/summary/"
	@echo "make similarity COURSE=dir     pairs of hand-ins that are one file [THRESHOLD=0..1]; COURSE/summary/similarity.html"
	@echo "make copy-class COURSE=dir     a class with planted copies to try similarity on [STUDENTS=n]"
	@echo "make gradescope                the Gradescope autograder zip in build/gradescope/"
	@echo "make bench                     bandwidth tables on the GPU -> docs/performance.md"

# The environment: reuses a working torch/triton where one is installed, else pins the CPU stack.
$(VENV)/.runtime: requirements/runtime.txt requirements/gpu-stack.txt requirements/constraints.txt tools/make_venv.py
	$(PYTHON) tools/make_venv.py $(VENV)
	@touch $@
$(VENV)/.nbgrader: $(VENV)/.runtime requirements/nbgrader.txt
	$(PYTHON) tools/make_venv.py $(VENV) --with nbgrader
	@touch $@
$(VENV)/.instructor: $(VENV)/.nbgrader requirements/instructor.txt
	$(PYTHON) tools/make_venv.py $(VENV) --with nbgrader --with instructor
	@touch $@
$(VENV)/.dev: $(VENV)/.instructor requirements/dev.txt
	$(PYTHON) tools/make_venv.py $(VENV) --with nbgrader --with instructor --with dev
	@touch $@
venv: $(VENV)/.runtime

grade: $(VENV)/.runtime
	$(PY) -m grader grade --assignment $(ASSIGNMENT) --submission $(SUBMISSION) --report $(REPORT) --device $(DEVICE)

# `make test`: ruff; the whole kill matrix once (every corpus entry graded, two at once), stamped
# with the files it was graded from (tools/matrix_stamp.py) so that the tests needing a corpus
# entry's grading read it instead of grading it again; then the tests on both cores, and the few
# that must have the machine to themselves (marked `serial`) after them. Every step runs even when
# one before it failed, and the target fails if any did.
TEST_JOBS ?= 2
MATRIX    ?= build/validate.json
test: $(VENV)/.dev
	$(PY) -m ruff check .
	@mkdir -p build; rc=0; \
	$(PY) tools/matrix_stamp.py run $(MATRIX) -- $(PY) -m grader validate --assignment $(ASSIGNMENT) \
	  --jobs $(TEST_JOBS) --out $(MATRIX) || rc=1; \
	$(PY) -m pytest tests/grader tests/assignment -q -n $(TEST_JOBS) --dist loadgroup -m "not serial" \
	  --durations=15 --junitxml=build/pytest-parallel.xml || rc=1; \
	$(PY) -m pytest tests/grader tests/assignment -q -p no:xdist -m serial \
	  --durations=15 --junitxml=build/pytest-serial.xml || rc=1; \
	exit $$rc

test-fast: $(VENV)/.dev
	$(PY) -m ruff check .
	$(PY) -m pytest tests/grader tests/assignment -q -n $(TEST_JOBS) --dist loadgroup -m "not slow" --durations=5

template: $(VENV)/.nbgrader
	$(PY) tools/make_template.py --assignment $(ASSIGNMENT)

release: $(VENV)/.runtime
	$(PY) tools/make_release.py --assignment $(ASSIGNMENT) --out build/release

validate: $(VENV)/.instructor
	$(PY) -m grader validate --assignment $(ASSIGNMENT) --out build/validate.json $(if $(JOBS),--jobs $(JOBS))

demo-class: $(VENV)/.runtime
	@test -n "$(COURSE)" || { echo "usage: make demo-class COURSE=dir"; exit 2; }
	$(PY) tools/make_demo_class.py --assignment $(ASSIGNMENT) --out $(COURSE)

grade-all: $(VENV)/.instructor
	@test -n "$(COURSE)" || { echo "usage: make grade-all COURSE=dir [DEVICE=auto|cpu|cuda] [JOBS=n] [EXECUTOR=local|slurm|submitit-local] [SLURM='--partition NAME ...']"; exit 2; }
	$(PY) -m grader grade-all --course $(COURSE) --assignment $(ASSIGNMENT) --device $(DEVICE) $(if $(JOBS),--jobs $(JOBS)) --executor $(EXECUTOR) $(SLURM)

summary: $(VENV)/.instructor
	@test -n "$(COURSE)" || { echo "usage: make summary COURSE=dir"; exit 2; }
	$(PY) -m grader summary --course $(COURSE) --assignment $(ASSIGNMENT)

similarity: $(VENV)/.instructor
	@test -n "$(COURSE)" || { echo "usage: make similarity COURSE=dir [THRESHOLD=0..1]"; exit 2; }
	$(PY) -m grader similarity --course $(COURSE) --assignment $(ASSIGNMENT) $(if $(THRESHOLD),--threshold $(THRESHOLD)) \
	  --out $(COURSE)/similarity.json --csv $(COURSE)/similarity.csv

copy-class: $(VENV)/.runtime
	@test -n "$(COURSE)" || { echo "usage: make copy-class COURSE=dir [STUDENTS=n]"; exit 2; }
	$(PY) tools/make_copy_class.py --assignment $(ASSIGNMENT) --out $(COURSE) $(if $(STUDENTS),--students $(STUDENTS))

gradescope: $(VENV)/.runtime
	$(PY) tools/make_gradescope.py --assignment $(ASSIGNMENT) --out build/gradescope

bench: $(VENV)/.runtime
	$(PY) bench/l1_paged_kv_write.py --out docs/performance.md

clean:
	rm -rf build
