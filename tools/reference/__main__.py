"""`python tools/reference NAME`: print one generated reference page (cli, settings, kafka-apis, metrics)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reference import PAGES, render

if __name__ == "__main__":
    names = {Path(path).stem: path for path in PAGES}
    if len(sys.argv) != 2 or sys.argv[1] not in names:
        sys.exit(f"usage: python tools/reference {{{','.join(names)}}}")
    sys.stdout.write(render(names[sys.argv[1]]))
