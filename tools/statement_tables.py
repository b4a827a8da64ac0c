"""Write the grading table and the performance curve into both statements, from assignment.toml.

    python tools/statement_tables.py --assignment assignment/l1_paged_kv_write
    python tools/statement_tables.py --assignment assignment/l1_paged_kv_write --check

Points, gates, devices and the curve are the rubric's; only the one-line description of
each area is written here, once per language. The block between the two markers of each
statement is replaced; the rest of the statement is left as it is.
"""
import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.assignment import Assignment  # noqa: E402

BEGIN = "<!-- BEGIN GENERATED: grading table (tools/statement_tables.py; edit assignment.toml) -->"
END = "<!-- END GENERATED: grading table -->"

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


def rewrite(text: str, new_block: str, name: str) -> str:
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise SystemExit(f"statement_tables: {name} needs the markers once each:\n{BEGIN}\n{END}")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return head + new_block + tail


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
        new = rewrite(text, block(assignment, lang), path.name)
        if new != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"{', '.join(stale)}: the grading table differs from assignment.toml; "
              f"run tools/statement_tables.py", file=sys.stderr)
        return 1
    print("up to date" if not stale else f"wrote {', '.join(stale)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
