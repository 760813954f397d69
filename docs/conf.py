"""Sphinx configuration of the cpgym documentation site (``sphinx-build -W -b html docs OUT``).

Markdown pages (MyST), the furo theme, the CLI reference generated from
``experiments.cli.build_parser`` (sphinx-argparse) and the API reference generated from the
docstrings of the top-level packages (autosummary, recursive: a new or renamed module appears
without editing these pages).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the packages themselves (also when cpgym is not installed)

# autosummary writes one stub per module into docs/api/ (generated, git-ignored). Start from an
# empty folder so that a renamed or removed module leaves no stale page behind.
shutil.rmtree(Path(__file__).resolve().parent / "api", ignore_errors=True)

project = "cpgym"
author = "cpgym authors"
copyright = "cpgym authors, Apache-2.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

html_theme = "furo"
html_title = "cpgym"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autosummary_generate = True
autosummary_imported_members = False
# Each object is documented once, on the page of the module that defines it: a package's
# ``__all__`` re-exports (``envs.sim.Simulator`` = ``envs.sim.simulator.Simulator``) are skipped,
# so cross-references are never ambiguous. The module template (``_templates/autosummary``) lets
# autodoc document the members and autosummary list only the sub-modules.
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# cpgym's ``Returns:`` / ``Yields:`` sections are prose ("One row per (policy, window): ``...``"),
# not napoleon's ``type: description`` form: render them as plain sections so that the text before
# a colon is never read (and cross-referenced) as a type.
napoleon_custom_sections = ["Returns", "Yields"]
