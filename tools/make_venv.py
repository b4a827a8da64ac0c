"""Create the project's virtual environment.

Where the interpreter that runs this script already imports a working torch and
triton (the GPU runner ships them and cannot download), the environment reuses
them through --system-site-packages and installs only what is missing.
Elsewhere it installs the pinned CPU stack from requirements/constraints.txt.

    python3 tools/make_venv.py .venv [--with nbgrader]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import venv
from pathlib import Path

REQ = Path(__file__).resolve().parent.parent / "requirements"


def has_working_stack(python: str) -> bool:
    probe = "import torch, triton, triton.language; print(torch.__version__, triton.__version__)"
    result = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if result.returncode == 0:
        print(f"make_venv: reusing torch/triton {result.stdout.strip()} from {python}")
        return True
    return False


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
        reuse = has_working_stack(sys.executable)
        venv.EnvBuilder(with_pip=True, system_site_packages=reuse).create(target)
        (target / "stack").write_text("system\n" if reuse else "pinned\n")
    pinned = (target / "stack").read_text().strip() == "pinned"
    constraints = ["-c", str(REQ / "constraints.txt")] if pinned else []
    sets = (["gpu-stack"] if pinned else []) + ["runtime"] + args.extras
    for name in sets:
        pip_install(python, *constraints, "-r", str(REQ / f"{name}.txt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
