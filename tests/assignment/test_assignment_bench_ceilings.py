"""The scattered-copy ceiling in docs/performance.md is only a ceiling for the write if the copy
behind it (bench/ceilings.py) moves every row exactly once to where it claims: a copy that
dropped or doubled rows would be faster than a real one. Checked on a row that is not a power
of two and a row count that is not a multiple of the rows per program (where it runs: see
run_kernel_check)."""
import pytest

CHECK = r"""
import sys, torch
sys.path.insert(0, "bench")
import ceilings
device = "cuda" if torch.cuda.is_available() else "cpu"
n_rows, row, run_rows, runs_dst = 37, 40, 4, 30
src = torch.arange(n_rows * row, dtype=torch.float32).view(n_rows, row).to(device)
problems = []
for stride in (1, ceilings.scattering_stride(runs_dst)):
    for rows, warps in ceilings.COPY_SHAPES:
        dst = torch.full((runs_dst * run_rows, row), -1.0, device=device)
        ceilings.run_copy(src, dst, run_rows, stride, rows, warps)
        where = ceilings.destination_rows(n_rows, run_rows, runs_dst, stride)
        untouched = torch.ones(runs_dst * run_rows, dtype=torch.bool)
        untouched[where] = False
        if len(set(where.tolist())) != n_rows:
            problems.append(f"stride {stride}: two source rows share a destination")
        if not torch.equal(dst.cpu()[where], src.cpu()):
            problems.append(f"stride {stride}, shape {(rows, warps)}: rows not where destination_rows says")
        if not bool((dst.cpu()[untouched] == -1).all()):
            problems.append(f"stride {stride}, shape {(rows, warps)}: wrote outside the destination rows")
if ceilings.scattering_stride(runs_dst) == 1:
    problems.append("the scattered stride is 1: nothing is scattered")
print(problems)
sys.exit(1 if problems else 0)
"""


@pytest.mark.slow
def test_run_copy_moves_every_row_once_to_its_destination(run_kernel_check):
    r = run_kernel_check(CHECK)
    assert r.returncode == 0, f"bench/ceilings.py's run copy is wrong: {r.stdout}{r.stderr[-2000:]}"
