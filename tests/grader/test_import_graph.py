"""grader/'s floors (tools/import_graph.py): a part imports only its own floor and those below it,
and no module imports itself around a cycle. The check runs on the tree in `make test`; here it
runs on the tree and on small packages built to break it, so that the guard itself can fail."""
import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("import_graph", REPO / "tools" / "import_graph.py")
import_graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(import_graph)


def package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "grader"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_tree_has_no_cycle_and_no_import_running_up():
    run = subprocess.run([sys.executable, str(REPO / "tools" / "import_graph.py")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_every_part_of_grader_is_a_floor_of_its_own_with_a_docstring():
    for sub in sorted(p for p in (REPO / "grader").iterdir() if (p / "__init__.py").is_file()):
        assert import_graph.part_of(f"grader.{sub.name}") is not None, f"grader/{sub.name} has no floor in PARTS"
        doc = (sub / "__init__.py").read_text()
        assert doc.lstrip().startswith('"""') and "May import" in doc and "Used by" in doc, \
            f"grader/{sub.name}/__init__.py should open with what it owns, what it may import and who uses it"


def test_a_part_that_imports_one_above_it_is_named_with_both_floors(tmp_path):
    root = package(tmp_path, {"sandbox/__init__.py": "", "sandbox/confine.py": "from ..course import folder\n",
                              "course/__init__.py": "", "course/folder.py": "from ..sandbox import confine\n"})
    edges = import_graph.graph(root)
    assert import_graph.arrows_up(edges) == [
        "grader.sandbox.confine (sandbox) imports grader.course.folder (course), a floor above it"]


def test_a_module_in_no_part_is_named():
    assert import_graph.arrows_up({"grader.elsewhere.x": set()}) == [
        "grader.elsewhere.x is in no part of PARTS (tools/import_graph.py): give it a floor"]


def test_a_cycle_is_refused(tmp_path):
    root = package(tmp_path, {"gpu/__init__.py": "", "gpu/a.py": "from . import b\n", "gpu/b.py": "from .a import x\n"})
    try:
        import_graph.layers(import_graph.graph(root))
    except ValueError as exc:
        assert "import cycle: grader.gpu.a -> grader.gpu.b -> grader.gpu.a" in str(exc)
    else:
        raise AssertionError("a cycle went through")
