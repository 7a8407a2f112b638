"""mkdocs hooks (mkdocs.yml `hooks:`): the reference pages join the site as it is built, written from the code.

They are generated rather than committed so that nothing can fall behind the code: a changed flag, default,
handler or metric is on the next build's page, with no step to remember and no copy to conflict in a merge.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference import PAGES, render


def on_files(files: Files, config: Any) -> Files:
    for site_path in PAGES:
        files.append(File.generated(config, site_path, content=render(site_path)))
    return files
