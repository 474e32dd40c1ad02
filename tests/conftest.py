"""The tests import the package of the checkout they are in (codegen/repo_import.py),
whichever copy is installed: a copy of the repository tests itself."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `codegen` is not part of the installed package
    sys.path.insert(0, str(ROOT))

from codegen.repo_import import use_repo  # noqa: E402

use_repo(ROOT)
