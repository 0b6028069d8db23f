"""Runs one tutorial notebook as a reader would, top to bottom in a fresh Jupyter kernel (nbclient), from the
repository root, and renders the executed notebook to HTML (nbconvert).

    python3 tutorials/execute_notebook.py tutorials/01_safe_softmax_welford_attention.ipynb --html OUT.html

Exits non-zero, saying why, when a cell raises (the cell and its traceback are printed), when the notebook as
stored carries outputs (they stay out of git: the tests produce them), or when a figure the notebook drew did not
make it into the HTML. The kernel imports `twist` from PYTHONPATH, which CTest points at the build tree.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=pathlib.Path)
    parser.add_argument("--html", type=pathlib.Path, required=True, help="where the rendered notebook goes")
    parser.add_argument("--cell-timeout", type=int, default=600, help="seconds a single cell may run")
    args = parser.parse_args()
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
        from nbconvert import HTMLExporter
    except ImportError as error:
        print(f"{args.notebook}: cannot run notebooks here ({error}); scripts/setup-debian.sh installs nbclient, "
              "nbformat, ipykernel, matplotlib and nbconvert", file=sys.stderr)
        return 1

    notebook = nbformat.read(args.notebook, as_version=4)
    stored = [k for k, cell in enumerate(notebook.cells)
              if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)]
    if stored:
        print(f"{args.notebook}: code cells {stored} are stored with outputs; clear them before committing "
              f"(jupyter nbconvert --clear-output --inplace {args.notebook})", file=sys.stderr)
        return 1

    client = NotebookClient(notebook, timeout=args.cell_timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(REPOSITORY)}})
    try:
        client.execute()
    except CellExecutionError as error:
        print(f"{args.notebook}: a cell failed\n{error}", file=sys.stderr)
        return 1

    figures = [output["data"]["image/png"].replace("\n", "") for cell in notebook.cells if cell.cell_type == "code"
               for output in cell.outputs if "image/png" in output.get("data", {})]
    html, _ = HTMLExporter().from_notebook_node(notebook)
    missing = sum(1 for figure in figures if figure[:200] not in html)
    if missing:
        print(f"{args.notebook}: {missing} of {len(figures)} figures drawn are not in the HTML", file=sys.stderr)
        return 1
    args.html.parent.mkdir(parents=True, exist_ok=True)
    args.html.write_text(html, encoding="utf-8")
    cells = sum(1 for cell in notebook.cells if cell.cell_type == "code")
    print(f"{args.notebook.name}: {cells} code cells ran, {len(figures)} figures, rendered to {args.html}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
