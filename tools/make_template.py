"""Generate the student template from the reference solution with nbgrader.

    python tools/make_template.py --assignment assignment/l1_paged_kv_write
    python tools/make_template.py --assignment assignment/l1_paged_kv_write --check

The reference marks each solution body with `### BEGIN SOLUTION` /
`### END SOLUTION`. nbgrader only clears solutions inside notebooks (it copies
.py files untouched), so the file travels through a one-cell notebook.
"""
import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.assignment import Assignment  # noqa: E402

# The reference's module docstring cites its own line numbers; once the bodies
# are cleared those numbers no longer match this file, so the header says so.
HEADER = """\
# Student template for L1, generated from the course solution by
# tools/make_template.py. Write each function's body in place of its
# `# YOUR CODE HERE` and the line under it: `raise NotImplementedError(...)`, or in
# the kernel `tl.static_assert(False, ...)` (a `raise` is not Triton). Until you do,
# the tests open with one line, "not written yet: ...", naming what is left, and
# skip the tests that need it. Keep the names and signatures: the tests and the
# grader import them. The line numbers in the docstring below are those of the
# course's solution file, which the L1 lesson reads; that file is not in this bundle.
"""


def clear_solutions(source: str) -> str:
    import nbformat
    from nbgrader.preprocessors import ClearSolutions

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    notebook, _ = ClearSolutions(enforce_metadata=False).preprocess(notebook, {})
    cleared = notebook.cells[0].source
    if "### BEGIN SOLUTION" in cleared or "### END SOLUTION" in cleared:
        raise SystemExit("make_template: a solution marker survived; are the markers balanced?")
    return cleared


# Inside @triton.jit a `raise` is not Triton: on the GPU the unwritten kernel would stop
# at compile time with "unsupported AST node type: Raise", far from the student's mistake.
# static_assert is Triton on both back ends and fails the first launch with a message
# that says what is missing. The note stands where the lesson's body goes: the signature
# alone does not say that strides count elements or what HD and BLOCK are.
KERNEL_SIGNATURE_END = "key_stride, value_stride, HD, BLOCK: tl.constexpr):\n"
KERNEL_PLACEHOLDER = """\
    # key_ptr, value_ptr: token t's H*D values start at key_ptr + t * key_stride
    #   (value_ptr + t * value_stride); strides count elements, not bytes.
    # k_cache_ptr, v_cache_ptr: contiguous caches; slot s owns the values [s*HD, (s+1)*HD).
    # slot_ptr: one int64 slot per token; -1 is a padding token.
    # HD = H * D; BLOCK: a tl.constexpr, a power of two >= HD (tl.arange needs one).
    # These parameters, the grid and any @triton.autotune/@triton.heuristics are yours to
    # change; reshape_and_cache launches whatever kernel you write.
    # YOUR CODE HERE
    tl.static_assert(False, "not written yet: reshape_and_cache_kernel")
"""
CLEARED = "    # YOUR CODE HERE\n    raise NotImplementedError()\n"
STUB = "    raise NotImplementedError()\n"


def named_stubs(cleared: str) -> str:
    """Each cleared Python body raises NotImplementedError("not written yet: <its name>"): the
    line the tests and the grader print for it, also where a script of your own calls it."""
    out, name = [], None
    for line in cleared.splitlines(keepends=True):
        if line.startswith("def "):
            name = line[4:line.index("(")]
        out.append(line.replace("raise NotImplementedError()", f'raise NotImplementedError("not written yet: {name}")')
                   if line == STUB and name else line)
    return "".join(out)


def jit_safe_kernel(cleared: str) -> str:
    start = cleared.index(KERNEL_SIGNATURE_END) + len(KERNEL_SIGNATURE_END)
    if not cleared.startswith(CLEARED, start):
        raise SystemExit("make_template: the kernel's cleared body is not where it was expected")
    return cleared[:start] + KERNEL_PLACEHOLDER + cleared[start + len(CLEARED):]


def render(reference_text: str) -> str:
    return HEADER + named_stubs(jit_safe_kernel(clear_solutions(reference_text))).rstrip("\n") + "\n"


def paths(assignment_dir: Path) -> tuple[Path, Path]:
    assignment = Assignment.load(assignment_dir)
    if assignment.template is None:
        raise SystemExit(f"make_template: {assignment_dir}/assignment.toml names no `template`")
    return assignment.reference, assignment.template


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", required=True, type=Path,
                        help="folder holding assignment.toml, relative to the repository root")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the committed template is out of date")
    args = parser.parse_args(argv)

    reference, template = paths(REPO / args.assignment)
    expected = render(reference.read_text(encoding="utf-8"))
    shown = template.relative_to(REPO)

    if args.check:
        current = template.read_bytes() if template.exists() else None
        if current != expected.encode("utf-8"):
            state = "is missing" if current is None else "differs from what the reference generates"
            print(f"{shown} {state}; run `make template` and commit the result", file=sys.stderr)
            return 1
        print(f"{shown} is up to date")
        return 0

    template.parent.mkdir(parents=True, exist_ok=True)
    template.write_bytes(expected.encode("utf-8"))
    print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
