"""policy: the write is done by a Triton kernel launched from reshape_and_cache.

Read from the source with `ast`; the submission is never imported here. Recognised: a
function decorated with triton.jit (through any alias of the triton module, `from triton
import jit`, with or without arguments, under other decorators such as autotune), and a
call of the form kernel[grid](...) of such a function inside reshape_and_cache or in a
module-level helper that reshape_and_cache calls."""
import ast

import pytest

pytestmark = pytest.mark.area("policy")

POLICY = ("the write must be a Triton kernel launched from reshape_and_cache; a pure PyTorch "
          "write earns no points for write/padding/strided_qkv/int64_overflow.")


def fail(message):
    raise AssertionError(message)   # the grader shows an assertion's message as the hint


def _parse(source):
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        fail(f"the submission does not parse (line {exc.lineno}): {exc.msg}.")


def _triton_names(tree):
    """(names bound to the triton module, names bound to triton.jit)."""
    modules, jits = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "triton":
                    modules.add(a.asname or "triton")
        elif isinstance(node, ast.ImportFrom) and node.module == "triton":
            for a in node.names:
                if a.name == "jit":
                    jits.add(a.asname or "jit")
    return modules, jits


def _is_jit(dec, modules, jits):
    if isinstance(dec, ast.Call):
        dec = dec.func
    if isinstance(dec, ast.Name):
        return dec.id in jits
    return (isinstance(dec, ast.Attribute) and dec.attr == "jit"
            and isinstance(dec.value, ast.Name) and dec.value.id in modules)


def _functions(tree):
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _kernels(tree):
    modules, jits = _triton_names(tree)
    return {name for name, fn in _functions(tree).items()
            if any(_is_jit(d, modules, jits) for d in fn.decorator_list)}


def _launches(fn, kernels):
    """Names of jitted kernels launched as kernel[grid](...) inside fn."""
    found = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
            target = node.func.value
            if isinstance(target, ast.Name) and target.id in kernels:
                found.add(target.id)
    return found


def _reachable(tree, start):
    """start and the module-level functions it calls, transitively."""
    funcs = _functions(tree)
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen or name not in funcs:
            continue
        seen.add(name)
        for node in ast.walk(funcs[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                todo.append(node.func.id)
    return seen


def test_defines_a_triton_kernel(submission_source, record_property):
    """The module defines a Triton kernel (a function decorated with @triton.jit)"""
    kernels = _kernels(_parse(submission_source))
    record_property("detail", f"jitted functions: {sorted(kernels)}")
    assert kernels, "no function decorated with @triton.jit was found: " + POLICY


def test_reshape_and_cache_launches_the_kernel(submission_source, record_property):
    """reshape_and_cache launches a Triton kernel as kernel[grid](...)"""
    tree = _parse(submission_source)
    if "reshape_and_cache" not in _functions(tree):
        fail("reshape_and_cache is not defined at module level: " + POLICY)
    kernels = _kernels(tree)
    launched = set()
    for name in _reachable(tree, "reshape_and_cache"):
        launched |= _launches(_functions(tree)[name], kernels)
    record_property("detail", f"kernels {sorted(kernels)}, launched {sorted(launched)}")
    assert launched, "reshape_and_cache never launches a @triton.jit kernel: " + POLICY
