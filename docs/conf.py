"""Sphinx configuration of graphsafe's documentation: ``make docs`` builds it into docs/_build/html."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

import graphsafe  # noqa: E402  (after the path set-up above)
from graphsafe.frontend.devices import prepare_engine  # noqa: E402

# the registered targets page imports the reference kernels: decide the engine (and so whether Triton
# runs interpreted) before anything imports triton, as the command line does
prepare_engine("auto")

project = "graphsafe"
author = "the graphsafe developers"
copyright = "the graphsafe developers"
release = graphsafe.__version__
version = release

extensions = ["myst_parser", "sphinx.ext.autodoc", "graphsafe_docs"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True}
smartquotes = False  # option names keep their "--", quotes stay straight

html_theme = "furo"
html_title = f"graphsafe {release}"
