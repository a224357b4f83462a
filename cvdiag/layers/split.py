"""Records by layer, and the requests a browser makes of its own accord.

CVDIAG v1 names three layers for one test id: ``probe`` (what the test client or the browser
saw), ``backend`` and ``aimock``. An envelope says its layer; one that does not (older logs,
hand-made lines) is known by its boundary's prefix, as the writers name them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from cvdiag.logs.reading import Record

LAYERS: Final = ("probe", "backend", "aimock")

#: Requests a browser sends of its own accord, carrying whatever headers its context adds (the
#: test id among them, through Playwright's ``extraHTTPHeaders``): the test never asked for them,
#: so their answers (a 404 for a missing icon) are not the test's.
_BROWSER_OWN: Final = re.compile(
    r"/(?:favicon\.ico|apple-touch-icon(?:-precomposed)?(?:-\d+x\d+)?(?:-precomposed)?\.png"
    r"|robots\.txt)"
)


def layer_of(envelope: dict[str, object]) -> str:
    """The envelope's layer: its ``layer`` when it is one of v1's, else its boundary's prefix."""
    layer = envelope.get("layer")
    if layer in LAYERS:
        return str(layer)
    boundary = envelope.get("boundary")
    prefix = boundary.split(".", 1)[0] if isinstance(boundary, str) else ""
    return prefix if prefix in LAYERS else "backend"


def is_probe(record: Record) -> bool:
    return layer_of(record.envelope) == "probe"


def split(records: Iterable[Record]) -> dict[str, list[Record]]:
    """The records by layer, each list in the order given."""
    layers: dict[str, list[Record]] = {}
    for record in records:
        layers.setdefault(layer_of(record.envelope), []).append(record)
    return layers


def path_of(url: object) -> str | None:
    """A URL or path as the backend's ingress writes it: the path alone, no scheme, host or
    query."""
    if not isinstance(url, str) or not url:
        return None
    if "://" in url:
        rest = url.split("://", 1)[1]
        slash = rest.find("/")
        url = rest[slash:] if slash >= 0 else "/"
    return url.split("?", 1)[0].split("#", 1)[0] or "/"


#: What a browser's own request's path ends with (before any query).
_ENDINGS: Final = (".ico", ".png", ".txt")


def browser_own(url: object) -> bool:
    """Whether ``url`` is one a browser requests of its own accord (an icon, ``robots.txt``)."""
    # Every ingress asks: a look at the name's end first, the pattern only for a likely one.
    if not isinstance(url, str) or (not url.endswith(_ENDINGS) and "?" not in url):
        return False
    path = path_of(url)
    return path is not None and _BROWSER_OWN.fullmatch(path) is not None
