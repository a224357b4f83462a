"""This folder is laid out as a showcase integration is: ``agents/_cvdiag_backend.py`` and
``_shared/cvdiag_bootstrap.py``, each one line over ``cvdiag.showcase``. An integration's tests
put its root on ``sys.path`` so that ``agents`` and ``_shared`` import; so does this."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
