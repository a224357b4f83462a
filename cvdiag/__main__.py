from __future__ import annotations

from cvdiag.cli import main

raise SystemExit(main())
