"""Create the project's virtual environment.

Where the interpreter that runs this script already imports a working torch and
triton (the GPU runner ships them and cannot download), the environment reuses
them through --system-site-packages and installs only what is missing.
Elsewhere it installs the pinned CPU stack from requirements/constraints.txt.

    python3 tools/make_venv.py .venv [--with nbgrader]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import venv
from pathlib import Path

REQ = Path(__file__).resolve().parent.parent / "requirements"


def working_stack(python: str) -> list[str] | None:
    """site-packages folders of an interpreter that imports torch and triton, else None."""
    probe = ("import json, site, torch, triton, triton.language; "
             "print(torch.__version__, triton.__version__); print(json.dumps(site.getsitepackages()))")
    result = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if result.returncode != 0:
        return None
    versions, paths = result.stdout.strip().splitlines()[-2:]
    print(f"make_venv: reusing torch/triton {versions} from {python}")
    return json.loads(paths)


def pip_install(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args]
    print("make_venv:", " ".join(cmd[3:]))
    subprocess.run(cmd, check=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("venv")
    parser.add_argument("--with", dest="extras", action="append", default=[],
                        help="extra requirement set from requirements/ (e.g. nbgrader)")
    args = parser.parse_args()
    target = Path(args.venv)
    python = target / "bin" / "python"
    if not python.exists():
        stack = working_stack(sys.executable)
        venv.EnvBuilder(with_pip=True, system_site_packages=stack is not None).create(target)
        if stack is not None:
            # The interpreter may itself be a venv, whose packages --system-site-packages
            # would not reach: point at its site-packages explicitly.
            site_dir = next((target / "lib").glob("python3*/site-packages"))
            (site_dir / "_reused_stack.pth").write_text("\n".join(stack) + "\n")
        (target / "stack").write_text("pinned\n" if stack is None else "system\n")
    pinned = (target / "stack").read_text().strip() == "pinned"
    constraints = ["-c", str(REQ / "constraints.txt")] if pinned else []
    sets = (["gpu-stack"] if pinned else []) + ["runtime"] + args.extras
    for name in sets:
        pip_install(python, *constraints, "-r", str(REQ / f"{name}.txt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
