"""Write a class with planted copies, to try `python -m grader similarity` and the class page's
similar hand-ins on: which pairs it must find, and which it must not.

    python tools/make_copy_class.py --out build/copy-class [--students 500]
    python -m grader similarity --course build/copy-class

Honest students hand in the corpus's right/ answers written from the template, one of each family
(HONEST: several right/ entries are edits of one file, and a detector that did not pair those
would be broken). Beside them, the copies a class really has:
- the reference solution handed in as it is, and again with its names renamed;
- an honest answer and the same answer with its functions in another order;
- an honest answer and a copy with its comments and blank lines changed;
- a wrong answer (the reference with one of the corpus's bugs) and a copy of it, names renamed;
- a wrong answer of a student's own (an honest one with the padding test dropped) and a copy of
  it disguised every way at once: renamed, reordered and recommented;
- an honest answer handed in twice, byte for byte.
`expected.json` beside the course names the planted pairs, the students whose file is the
reference's, and the honest students. `--students N` pads the class to N with renamed copies of
the honest answers: a class of that size to time, whose extra pairs are copies too.
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import random
import sys
import tempfile
import tokenize
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.assignment import Assignment  # noqa: E402
from grader.validate.corpus import load_corpus  # noqa: E402

# One right/ entry per family of edits of one file; the others of a family are left out
# (autotune_restore_value is autotune_configs plus one argument, compiled_wrapper and
# triton_op_wrap_triton move its launch into a wrapper, cached_block adds a cache to it).
HONEST = ("autotune_configs", "block_ptr_rows", "class_launcher_run", "custom_op_launch", "from_triton_import_jit",
          "grid_2d_tiles", "heuristics_block", "int64_stride_args", "jit_call_alias", "lambda_grid",
          "program_per_head", "three_launches", "triton_as_tr_helper")

# A student's renaming: local names only, never a keyword argument's name or an attribute.
RENAMES = {"slot": "dest_slot", "offs": "cols", "t": "tok", "dst": "where", "k": "krow", "v": "vrow",
           "n_valid": "count", "logical_block": "page_no", "physical_block": "frame", "page": "frame",
           "T": "ntok", "x": "tensor", "HD": "row_len", "h": "head", "d": "lane",
           "src": "origin", "token": "tok", "cols": "lanes", "blocks": "frames", "table": "tbl", "pos": "where_in"}


def rename(source: str, names: dict[str, str] = RENAMES) -> str:
    """`source` with the NAME tokens in `names` renamed, every other character kept."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    edits = []
    for i, tok in enumerate(tokens):
        prev = tokens[i - 1].string if i else ""
        nxt = tokens[i + 1].string if i + 1 < len(tokens) else ""
        keyword_arg = nxt == "=" and prev in ("(", ",")
        if tok.type == tokenize.NAME and tok.string in names and prev != "." and not keyword_arg:
            edits.append((tok.start, tok.end, names[tok.string]))
    lines = source.splitlines(keepends=True)
    for (row, begin), (_, end), new in reversed(edits):     # right to left: columns stay true
        lines[row - 1] = lines[row - 1][:begin] + new + lines[row - 1][end:]
    return "".join(lines)


def reorder(source: str) -> str:
    """`source` with its top-level functions in reverse order (decorators and all)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    funcs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    spans = [(min([n.lineno] + [d.lineno for d in n.decorator_list]) - 1, n.end_lineno) for n in funcs]
    head = "".join(lines[:spans[0][0]])
    tail = "".join(lines[spans[-1][1]:])
    blocks = ["".join(lines[a:b]).rstrip("\n") + "\n" for a, b in spans]
    outside = [lines[i] for i in range(spans[0][0], spans[-1][1]) if not any(a <= i < b for a, b in spans)]
    if any(line.strip() and not line.lstrip().startswith("#") for line in outside):
        raise ValueError("module code between the functions: its order would matter")
    return head + "\n\n".join(reversed(blocks)) + tail


def recomment(source: str) -> str:
    """`source` without its comments, with other comments and blank lines of another student's."""
    kept = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            continue
        kept.append(tok)
    bare = [line.rstrip() for line in tokenize.untokenize(kept).splitlines()]
    out = []
    for i, line in enumerate(bare):
        if not line.strip():
            continue                                   # their blank lines go
        indent = line[:len(line) - len(line.lstrip())]
        if line.lstrip().startswith(("def ", "@")) and out and not out[-1].lstrip().startswith("@"):
            out += ["", "", "", f"{indent}# ---- next part ----"]
        elif i % 4 == 0 and line.startswith(" ") and not line.rstrip().endswith((",", "(")):
            out.append(f"{indent}# step {i}")
        out.append(line)
    return "\n".join(out) + "\n"


def build(out: Path, assignment: Assignment, students: int = 0, seed: int = 0) -> dict:
    if (out / "submitted").exists():
        raise SystemExit(f"{out}/submitted already exists: give a new folder")
    out.mkdir(mode=0o700, parents=True, exist_ok=True)      # copies of the solution: closed to others
    right = assignment.corpus / "right"
    honest = {f"honest_{name}": (right / f"{name}.py").read_text() for name in HONEST}
    reference = assignment.reference.read_text()
    with tempfile.TemporaryDirectory(prefix="copy-class-mutants-") as mutants:
        wrong = next(e for e in load_corpus(assignment, mutants=Path(mutants)) if e.kind == "wrong")
        wrong_text = wrong.file.read_text()
    own_wrong = honest["honest_heuristics_block"].replace("tl.where(slot >= 0, HD, 0)", "HD")
    if own_wrong == honest["honest_heuristics_block"]:
        raise SystemExit("right/heuristics_block.py changed: its padding test is not where this tool looks")
    planted = {
        "leaked_reference": reference,
        "renamed_reference": rename(reference),
        "reordered_a": honest["honest_program_per_head"],
        "reordered_b": reorder(rename(honest["honest_program_per_head"])),
        "recommented_a": honest["honest_grid_2d_tiles"],
        "recommented_b": recomment(honest["honest_grid_2d_tiles"]),
        f"wrong_{wrong.name}": wrong_text,
        "wrong_copy": rename(wrong_text),
        "identical_a": honest["honest_triton_as_tr_helper"],
        "identical_b": honest["honest_triton_as_tr_helper"],
        "own_wrong": own_wrong,
        "own_wrong_copy": recomment(reorder(rename(own_wrong))),
    }
    # The planted students' originals are theirs, not honest ones: each planted pair stands alone.
    for taken in ("program_per_head", "grid_2d_tiles", "triton_as_tr_helper", "heuristics_block"):
        del honest[f"honest_{taken}"]
    files = {**honest, **planted}
    rng = random.Random(seed)
    bases = sorted(honest)
    for i in range(max(0, students - len(files))):
        base = files[bases[i % len(bases)]]
        mapping = dict(rng.sample(sorted(RENAMES.items()), k=len(RENAMES) // 2))
        files[f"pad_{i:03d}"] = rename(base, mapping) + f"\n# student {i}\n"
    for student, text in files.items():
        folder = out / "submitted" / student / assignment.id
        folder.mkdir(parents=True)
        (folder / assignment.submission).write_text(text)
    return {
        "planted_pairs": [["leaked_reference", "renamed_reference"], ["reordered_a", "reordered_b"],
                          ["recommented_a", "recommented_b"], [f"wrong_{wrong.name}", "wrong_copy"],
                          ["identical_a", "identical_b"], ["own_wrong", "own_wrong_copy"]],
        "near_reference": ["leaked_reference", "renamed_reference", f"wrong_{wrong.name}", "wrong_copy"],
        "honest": sorted(honest),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the course folder to create")
    ap.add_argument("--assignment", help="assignment folder (default: the only one under assignment/)")
    ap.add_argument("--students", type=int, default=0, help="pad the class to this many students")
    args = ap.parse_args(argv)
    out = Path(args.out)
    expected = build(out, Assignment.find(args.assignment), args.students)
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    count = sum(1 for _ in (out / "submitted").iterdir())
    print(f"{count} students in {out}/submitted; planted pairs in {out}/expected.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
