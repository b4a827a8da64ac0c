"""Write the generated tables into both statements: the grading table and the performance curve
(from assignment.toml), the graded shapes (from the hidden suites) and the timed cases with the
reference's figures (from the suites' timing.py and docs/performance.md).

    python tools/statement_tables.py --assignment assignment/l1_paged_kv_write
    python tools/statement_tables.py --assignment assignment/l1_paged_kv_write --check

Points, gates, devices and the curve are the rubric's; shapes are read from the suites' source
(their constants and the literal shapes their tests use), never typed here; only the words around
them are written here, once per language. The block between each pair of markers is replaced;
the rest of the statement is left as it is.
"""
import argparse
import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.assignment import Assignment  # noqa: E402

BEGIN = "<!-- BEGIN GENERATED: grading table (tools/statement_tables.py; edit assignment.toml) -->"
END = "<!-- END GENERATED: grading table -->"
SHAPES_BEGIN = "<!-- BEGIN GENERATED: graded shapes (tools/statement_tables.py; read from tests/hidden) -->"
SHAPES_END = "<!-- END GENERATED: graded shapes -->"
TIMED_BEGIN = ("<!-- BEGIN GENERATED: timed cases (tools/statement_tables.py; read from tests/hidden and "
               "docs/performance.md) -->")
TIMED_END = "<!-- END GENERATED: timed cases -->"

DESCRIPTIONS = {
    "en": {
        "slot_mapping": "slots from the block table, as int64, without a Python loop",
        "write": "each token's `H*D` values land at its slot in both caches, nothing else changes, "
                 "`key`/`value` unchanged",
        "padding": "a −1 slot moves nothing; slot 0 is an ordinary slot",
        "strided_qkv": "`key`/`value` as views of a fused QKV tensor, and with different token strides",
        "int64_overflow": "offsets stay right when `slot*H*D` passes 2^31 (100,000 × 16 × 32 × 128 cache)",
        "validation": "non-contiguous caches and non-contiguous `[H, D]` rejected before any write",
        "policy": "the write is done by a Triton kernel launched from `reshape_and_cache` (seen in the "
                  "run: a launch, and no PyTorch write of the caches; custom ops, `triton_op` and "
                  "`torch.compile` are looked through)",
        "kernel_write": "a Triton kernel is launched, and the caches come out the same when every PyTorch "
                        "write of them is held back",
        "performance": "bandwidth on the GPU compared with the reference kernel in the same run",
    },
    "zh": {
        "slot_mapping": "由 block table 算出 slot，int64，不用 Python 循环",
        "write": "每个 token 的 `H*D` 个值落到两个 cache 中它的 slot 上，其他位置不变，`key`/`value` 不被修改",
        "padding": "slot −1 不读不写；slot 0 是普通的 slot",
        "strided_qkv": "`key`/`value` 是 fused QKV 张量的 view，两者的 token stride 也可以不同",
        "int64_overflow": "`slot*H*D` 超过 2^31 时偏移仍然正确（100,000 × 16 × 32 × 128 的 cache）",
        "validation": "不连续的 cache、不连续的 `[H, D]` 在写入前被拒绝",
        "policy": "写入由 `reshape_and_cache` 启动的 Triton kernel 完成（看运行本身：有 kernel 启动，"
                  "且没有 PyTorch 操作写 cache；custom op、`triton_op`、`torch.compile` 会被看穿）",
        "kernel_write": "启动了 Triton kernel，并且把所有写 cache 的 PyTorch 操作拦下不执行时，cache 的结果不变",
        "performance": "GPU 上的带宽，与同一次运行中的参考 kernel 相比",
    },
}

WORDS = {
    "en": {"head": "| Area | Points | Needs in full | What it checks |\n|---|---|---|---|",
           "gpu": " (GPU only)", "none": "—",
           "curve": "`{area}` is scored on a curve: *measure* = the reference's time / yours, on the same "
                    "inputs in the same run; a test earns this fraction of its points:",
           "curve_head": "| measure | fraction | points of `{area}` (all its tests) |\n|---|---|---|",
           "curve_tail": "Linear in between, flat beyond the ends.",
           "total": "{total} points in all; {cpu} where there is no GPU ({gpu_areas} left out)."},
    "zh": {"head": "| 评分项 | 分值 | 前提（须全部通过） | 检查内容 |\n|---|---|---|---|",
           "gpu": "（仅 GPU）", "none": "—",
           "curve": "`{area}` 按曲线计分：*measure* = 参考 kernel 的用时 / 你的用时（同一次运行、同样的输入）；"
                    "每个测试得到其分值的以下比例：",
           "curve_head": "| measure | 比例 | `{area}` 得分（全部测试） |\n|---|---|---|",
           "curve_tail": "中间按线性插值，两端之外保持不变。",
           "total": "满分 {total} 分；没有 GPU 时为 {cpu} 分（不含 {gpu_areas}）。"},
}


def _num(x: float) -> str:
    return f"{x:g}"


def block(assignment: Assignment, lang: str) -> str:
    words, desc = WORDS[lang], DESCRIPTIONS[lang]
    areas = assignment.areas
    missing = sorted(set(areas) - set(desc))
    if missing:
        raise SystemExit(f"statement_tables: no {lang} description for {', '.join(missing)}")
    rows = [words["head"]]
    for name, area in areas.items():
        needs = ", ".join(f"`{r}`" for r in area.requires) or words["none"]
        gpu = words["gpu"] if area.device == "cuda" else ""
        rows.append(f"| `{name}` | {_num(area.points)} | {needs} | {desc[name]}{gpu} |")
    total = sum(a.points for a in areas.values())
    cpu = sum(a.points for a in areas.values() if a.device != "cuda")
    gpu_areas = ", ".join(f"`{n}`" for n, a in areas.items() if a.device == "cuda")
    parts = ["\n".join(rows), words["total"].format(total=_num(total), cpu=_num(cpu), gpu_areas=gpu_areas)]
    for name, area in areas.items():
        if not area.curve:
            continue
        xs = sorted({x for x, _ in area.curve} | {round((area.curve[0][0] + area.curve[-1][0]) / 2, 3)})
        lines = [words["curve_head"].format(area=name)]
        for x in xs:
            f = area.credit(x)
            lines.append(f"| {_num(x)} | {f:.2f} | {area.points * f:.2f} |")
        parts += [words["curve"].format(area=name), "\n".join(lines), words["curve_tail"]]
    return "\n\n".join([BEGIN, *parts, END])


# --- the graded shapes, read from the hidden suites ---------------------------------------

SHAPE_NAMES = {"T": "T", "H": "H", "D": "D", "BS": "bs", "bs": "bs", "block_size": "bs", "NB": "nb", "nb": "nb",
               "SPEED_T": "T", "SPEED_BS": "bs"}
DTYPE_NAMES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "fp16": "fp16", "bf16": "bf16",
               "fp32": "fp32"}
COLUMNS = ("T", "H", "D", "HD", "bs", "nb")

SHAPE_WORDS = {
    "en": {"head": "| Area | T (tokens) | H | D | H·D | block size | blocks | dtype |\n"
                   "|---|---|---|---|---|---|---|---|",
           "few": "a few dozen", "none": "—", "all": "any",
           "slot_row": "| `slot_mapping` | {T} | — | — | — | {bs} | block numbers up to 2^31 − 1 | "
                       "`block_table`, `seq_idx`, `positions`: int32 or int64 |",
           "note": "Ranges are inclusive; every combination listed for an area is not necessarily "
                   "graded, but nothing outside these ranges is."},
    "zh": {"head": "| 评分项 | T（token 数） | H | D | H·D | block 大小 | block 数 | dtype |\n"
                   "|---|---|---|---|---|---|---|---|",
           "few": "几十个", "none": "—", "all": "任意",
           "slot_row": "| `slot_mapping` | {T} | — | — | — | {bs} | block 编号最大到 2^31 − 1 | "
                       "`block_table`、`seq_idx`、`positions`：int32 或 int64 |",
           "note": "范围包含两端；表中一个评分项的各种组合不一定都会评到，但评分不会超出这些范围。"},
}


def _value(node, scope):
    """The value of a literal or of a simple expression over names already known, else None."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        pass
    if isinstance(node, ast.Attribute) and node.attr in DTYPE_NAMES:
        return DTYPE_NAMES[node.attr]
    try:
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        if names and names <= set(scope) and all(isinstance(n, (ast.BinOp, ast.Name, ast.Constant, ast.operator,
                                                                  ast.expr_context)) for n in ast.walk(node)):
            return eval(compile(ast.Expression(node), "<shape>", "eval"), {}, dict(scope))
    except Exception:
        pass
    return None


class _Shapes:
    """What one suite file says about the shapes it grades: its area, and per scope (the module
    and each function) the values bound to T, H, D, block size and blocks."""

    def __init__(self, path: Path, helpers: dict | None = None):
        self.helpers = helpers or {}             # function name -> the shapes its body fixes
        self.tree = ast.parse(path.read_text(encoding="utf-8"))
        self.area = None
        self.rows: list[dict] = []           # one dict per scope or per case: name -> value
        self.dtypes: set[str] = set()
        self.imports_from: list[str] = []
        module: dict = {}
        self._case_tables: list[ast.Dict] = []
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
                self.area = next((c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)
                                  and isinstance(c.value, str)), None)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("test_"):
                self.imports_from.append(node.module)
        self._scope(self.tree.body, module, top=True)
        for cases in self._case_tables:          # after the whole module: BLOCK_SIZE follows CASES
            self._cases(cases, module)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute) and node.attr in ("float16", "bfloat16", "float32"):
                self.dtypes.add(DTYPE_NAMES[node.attr])

    def _bind(self, target, value_node, scope):
        if isinstance(target, ast.Name):
            value = _value(value_node, scope)
            if value is not None:
                scope[target.id] = value
        elif isinstance(target, ast.Tuple) and isinstance(value_node, ast.Tuple) \
                and len(target.elts) == len(value_node.elts):
            for t, v in zip(target.elts, value_node.elts):
                self._bind(t, v, scope)

    def _scope(self, body, scope, top=False):
        for node in body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._bind(target, node.value, scope)
                if any(getattr(t, "id", None) == "CASES" for t in node.targets) and isinstance(node.value, ast.Dict):
                    self._case_tables.append(node.value)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    self._parametrize(decorator, scope)
                inner = dict(scope)
                self._scope(node.body, inner)
                self._calls(node, inner)
                self._row(inner)
        if top:
            self._row(scope)

    def _cases(self, cases: ast.Dict, scope):
        """A table of cases: (dtype, H, D, bs, nb, T) in test_write, (T, H, D, dtype, layout, n) in
        timing.py, told apart by where the dtype stands."""
        for value in cases.values:
            case = [_value(v, scope) for v in getattr(value, "elts", [])]
            if len(case) == 6 and case[0] in DTYPE_NAMES.values():
                dt, H, D, bs, nb, T = case
                self.rows.append({"T": T, "H": H, "D": D, "bs": bs, "nb": nb, "dtype": dt})
            elif len(case) == 6 and case[3] in DTYPE_NAMES.values():
                T, H, D, dt, _layout, n = case
                bs = scope.get("BLOCK_SIZE")
                self.rows.append({"T": T, "H": H, "D": D, "bs": bs, "dtype": dt,
                                  "nb": -(-(2 * n * T) // bs) if bs else None})

    def _parametrize(self, decorator, scope):
        """@pytest.mark.parametrize("block_size,...", [...]): the shape values a test is run with."""
        if not (isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", None) == "parametrize"
                and len(decorator.args) >= 2):
            return
        names = [n.strip() for n in str(_value(decorator.args[0], scope) or "").split(",")]
        values = _value(decorator.args[1], scope)
        if not isinstance(values, (list, tuple)):
            return
        for i, name in enumerate(names):
            if name not in SHAPE_NAMES:
                continue
            for v in values:
                v = v[i] if isinstance(v, tuple) and len(names) > 1 else v
                if isinstance(v, int):
                    self.rows.append({SHAPE_NAMES[name]: v})

    def _calls(self, function, scope):
        """T given as a literal where a test makes its rows (token_rows(rng, 16, ...)), or an
        empty batch (torch.empty(0, ...))."""
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name == "token_rows" and len(node.args) > 1:
                T = _value(node.args[1], scope)
                if isinstance(T, int):
                    self.rows.append({**{k: scope[k] for k in ("H", "D") if k in scope}, "T": T})
            if name == "empty" and node.args and _value(node.args[0], scope) == 0:
                self.rows.append({"T": 0})
            if name in self.helpers:             # a helper of paged.py that writes a batch of its own
                self.rows.append({**{k: scope[k] for k in ("H", "D") if k in scope}, **self.helpers[name]})

    def _row(self, scope):
        row = {SHAPE_NAMES[k]: v for k, v in scope.items() if k in SHAPE_NAMES and isinstance(v, int)}
        if isinstance(scope.get("DTYPE"), str):
            row["dtype"] = scope["DTYPE"]
        if row:
            self.rows.append(row)


def graded_shapes(hidden: Path) -> dict[str, dict[str, set]]:
    """area -> column -> the values its tests use, from every test file of the suite and its
    timing.py (the performance area's cases). An area whose file names no shape of its own takes
    those of the suite file it imports its calls from (kernel_write from test_policy)."""
    helpers = {}
    for path in sorted(hidden.glob("*.py")):
        if path.name.startswith(("test_", "conftest")) or path.name == "timing.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef):
                fixed: dict = {}
                shapes = _Shapes.__new__(_Shapes)
                shapes.rows, shapes._case_tables = [], []
                for stmt in node.body:
                    if isinstance(stmt, ast.Assign):
                        for target in stmt.targets:
                            shapes._bind(target, stmt.value, fixed)
                row = {SHAPE_NAMES[k]: v for k, v in fixed.items() if k in SHAPE_NAMES and isinstance(v, int)}
                if row:
                    helpers[node.name] = row
    files = {p.stem: _Shapes(p, helpers) for p in sorted(hidden.glob("test_*.py"))}
    timing = hidden / "timing.py"
    out: dict[str, dict[str, set]] = {}
    for stem, shapes in files.items():
        if shapes.area is None:
            continue
        rows = list(shapes.rows)
        if stem == "test_performance" and timing.exists():
            rows = _Shapes(timing).rows
        dtypes = set(shapes.dtypes)
        if not any(("H" in r or "T" in r) for r in rows):
            for other in shapes.imports_from:
                rows += files[other].rows if other in files else []
                dtypes |= files[other].dtypes if other in files else set()
        cols: dict[str, set] = {c: set() for c in (*COLUMNS, "dtype")}
        for r in rows:
            for c in ("T", "H", "D", "bs", "nb"):
                if isinstance(r.get(c), int):
                    cols[c].add(r[c])
            if isinstance(r.get("H"), int) and isinstance(r.get("D"), int):
                cols["HD"].add(r["H"] * r["D"])
            if r.get("dtype"):
                cols["dtype"].add(r["dtype"])
        if not cols["dtype"]:
            cols["dtype"] = dtypes
        out[shapes.area] = cols
    return out


def _span(values: set, words: dict) -> str:
    nums = sorted(v for v in values if isinstance(v, int))
    if not nums:
        return words["few"]
    if len(nums) <= 2:
        return ", ".join(f"{v:,}" for v in nums)
    return f"{nums[0]:,}–{nums[-1]:,}"


def shapes_block(assignment: Assignment, lang: str) -> str:
    words = SHAPE_WORDS[lang]
    shapes = graded_shapes(assignment.hidden_tests)
    rows = [words["head"]]
    for area in assignment.areas:
        cols = shapes.get(area)
        if cols is None:
            continue
        if area == "slot_mapping":
            rows.append(words["slot_row"].format(T=_span(cols["T"], words), bs=_span(cols["bs"], words)))
            continue
        dtypes = ", ".join(d for d in ("fp16", "bf16", "fp32") if d in cols["dtype"])
        rows.append(f"| `{area}` | " + " | ".join(_span(cols[c], words) for c in COLUMNS) + f" | {dtypes} |")
    return "\n\n".join([SHAPES_BEGIN, "\n".join(rows), words["note"], SHAPES_END])


# --- the timed cases, with the reference's figures from docs/performance.md ----------------

PERFORMANCE = REPO / "docs" / "performance.md"
TIMED_WORDS = {
    "en": {"head": "| case | T | H | D | dtype | key/value | reference on the H200 | of the copy ceiling |\n"
                   "|---|---|---|---|---|---|---|---|",
           "fused": "views of a fused QKV tensor", "plain": "contiguous",
           "names": {"prefill-fp16-fused": "prefill", "decode-bf16-fused-h32": "decode, wide model",
                     "hd640-fp16-plain": "`H*D` = 640"},
           "ceiling": "The copy ceiling, a 1 GiB device-to-device copy by PyTorch, was {ceiling:,} GB/s on "
                      "that H200 (`performance.md` in this bundle: {measured})."},
    "zh": {"head": "| 情形 | T | H | D | dtype | key/value | 参考 kernel（H200） | 占拷贝上限 |\n"
                   "|---|---|---|---|---|---|---|---|",
           "fused": "fused QKV 张量的 view", "plain": "连续张量",
           "names": {"prefill-fp16-fused": "prefill", "decode-bf16-fused-h32": "decode，宽模型",
                     "hd640-fp16-plain": "`H*D` = 640"},
           "ceiling": "拷贝上限（PyTorch 在设备内拷贝 1 GiB）在那块 H200 上是 {ceiling:,} GB/s"
                      "（见本作业包里的 `performance.md`：{measured}）。"},
}


def reference_figures(performance: Path = PERFORMANCE) -> tuple[dict, int, str]:
    """((T, H, D, dtype, layout) -> (GB/s, % of the ceiling)) for the rows without padding, the
    copy ceiling in GB/s, and the line that says when and where they were measured."""
    text = performance.read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[0].isdigit() and cells[5] == "none":
            rows[(int(cells[0]), int(cells[1]), int(cells[2]), cells[3], cells[4])] = (int(cells[6]), cells[7])
    ceiling = int(re.search(r"copy ceiling: (\d+) GB/s", text).group(1))
    measured = re.search(r"^Measured: (.+?)\.?$", text, re.MULTILINE).group(1)
    return rows, ceiling, measured


def timed_cases(hidden: Path) -> dict[str, tuple]:
    """case -> (T, H, D, dtype, layout, launches), read from the suite's timing.py."""
    tree = ast.parse((hidden / "timing.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CASES" for t in node.targets):
            return {_value(k, {}): tuple(_value(v, {}) for v in value.elts)
                    for k, value in zip(node.value.keys, node.value.values)}
    raise SystemExit(f"statement_tables: no CASES in {hidden / 'timing.py'}")


def timed_block(assignment: Assignment, lang: str) -> str:
    words = TIMED_WORDS[lang]
    figures, ceiling, measured = reference_figures()
    rows = [words["head"]]
    for case, (T, H, D, dtype, layout, _n) in timed_cases(assignment.hidden_tests).items():
        if (T, H, D, dtype, layout) not in figures:
            raise SystemExit(f"statement_tables: {PERFORMANCE.name} has no row without padding for the timed "
                             f"case {case} ({T}, {H}, {D}, {dtype}, {layout}); run `make bench` on the GPU")
        gbps, share = figures[(T, H, D, dtype, layout)]
        rows.append(f"| {words['names'].get(case, case)} | {T:,} | {H} | {D} | {dtype} | {words[layout]} | "
                    f"{gbps:,} GB/s | {share} |")
    return "\n\n".join([TIMED_BEGIN, "\n".join(rows), words["ceiling"].format(ceiling=ceiling, measured=measured),
                        TIMED_END])


BLOCKS = ((BEGIN, END, block), (SHAPES_BEGIN, SHAPES_END, shapes_block), (TIMED_BEGIN, TIMED_END, timed_block))


def rewrite(text: str, new_block: str, name: str, begin: str = BEGIN, end: str = END) -> str:
    if text.count(begin) != 1 or text.count(end) != 1:
        raise SystemExit(f"statement_tables: {name} needs the markers once each:\n{begin}\n{end}")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return head + new_block + tail


def render(assignment: Assignment, text: str, lang: str, name: str) -> str:
    """The statement with every generated block made afresh."""
    for begin, end, make in BLOCKS:
        text = rewrite(text, make(assignment, lang), name, begin, end)
    return text


def statements(assignment_dir: Path) -> dict[str, Path]:
    return {lang: assignment_dir / f"statement.{lang}.md" for lang in DESCRIPTIONS}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", required=True, type=Path,
                        help="folder holding assignment.toml, relative to the repository root")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a statement's block is out of date")
    args = parser.parse_args(argv)
    folder = REPO / args.assignment
    assignment = Assignment.load(folder)
    stale = []
    for lang, path in statements(folder).items():
        text = path.read_text(encoding="utf-8")
        new = render(assignment, text, lang, path.name)
        if new != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"{', '.join(stale)}: a generated table (grading, graded shapes or timed cases) differs "
              f"from assignment.toml, the hidden suites or docs/performance.md; run tools/statement_tables.py",
              file=sys.stderr)
        return 1
    print("up to date" if not stale else f"wrote {', '.join(stale)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
