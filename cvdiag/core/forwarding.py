"""Which outbound hosts receive the test id (``x-test-id``) and the mock-routing slug header.

Those headers exist for the test rig: a local fake or mock LLM, a sibling service in the same
compose file, a cluster-internal backend. Sent to a real provider they only leak test
vocabulary (a slug names a test) to a third party, so by default they go to *local* hosts only:

- loopback (``localhost``, ``*.localhost``, ``127.0.0.0/8``, ``::1``);
- private addresses (``10/8``, ``172.16/12``, ``192.168/16``, ``fc00::/7``), not link-local (the
  cloud metadata service lives there);
- names that are local by construction: a single label with no dot (a compose or Kubernetes
  service name such as ``aimock``) and ``*.local``, ``*.internal``, ``*.lan``, ``*.home.arpa``,
  ``*.svc``.

More hosts are added in code (``instrument_httpx(client, forward_hosts=[...])``,
``Settings(forward_hosts=...)``) or by ``CVDIAG_FORWARD_HOSTS``: exact host names (or IP
addresses), ``*.suffix`` patterns for subdomains, or ``*`` for every host (the old behaviour).
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import re
from collections.abc import Iterable
from typing import Final

__all__ = ["ForwardPolicy", "is_local_host", "split_forward_hosts"]

_LOCAL_SUFFIXES: Final = (".localhost", ".local", ".internal", ".lan", ".home.arpa", ".svc")
_LABEL: Final = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")


def _normal(host: str) -> str:
    return host.strip().lower().removeprefix("[").removesuffix("]").rstrip(".")


@functools.lru_cache(maxsize=512)
def is_local_host(host: str) -> bool:
    """Whether ``host`` is loopback, private or local by name (see the module docstring)."""
    host = _normal(host)
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "." not in host or host.endswith(_LOCAL_SUFFIXES) or host == "localhost"
    if address.is_loopback:
        return True
    return address.is_private and not address.is_link_local and not address.is_unspecified


def valid_pattern(item: str) -> bool:
    """A host name, an IP address, ``*.suffix`` or ``*``."""
    item = _normal(item)
    if item == "*":
        return True
    if item.startswith("*."):
        return bool(_HOST.fullmatch(item[2:]))
    try:
        ipaddress.ip_address(item)
    except ValueError:
        return bool(_HOST.fullmatch(item))
    return True


def split_forward_hosts(items: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``items`` as (accepted, rejected), each stripped of blanks."""
    accepted: list[str] = []
    rejected: list[str] = []
    for item in items:
        if item.strip():
            (accepted if valid_pattern(item) else rejected).append(item.strip())
    return tuple(accepted), tuple(rejected)


@dataclasses.dataclass(frozen=True)
class ForwardPolicy:
    """Local hosts, plus the configured ones."""

    everywhere: bool = False
    hosts: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()

    @classmethod
    def of(cls, patterns: Iterable[str]) -> ForwardPolicy:
        """The policy for valid ``patterns`` (invalid ones are skipped: checked earlier)."""
        hosts: set[str] = set()
        suffixes: list[str] = []
        everywhere = False
        for raw in patterns:
            item = _normal(raw)
            if not valid_pattern(item):
                continue
            if item == "*":
                everywhere = True
            elif item.startswith("*."):
                suffixes.append(item[1:])
            else:
                hosts.add(item)
        return cls(everywhere=everywhere, hosts=frozenset(hosts), suffixes=tuple(suffixes))

    def allows(self, host: str) -> bool:
        """Whether a request to ``host`` gets the test id and slug headers."""
        if self.everywhere or is_local_host(host):
            return True
        host = _normal(host)
        return host in self.hosts or host.endswith(self.suffixes)


@functools.lru_cache(maxsize=32)
def policy_for(patterns: tuple[str, ...]) -> ForwardPolicy:
    """One policy per distinct configuration (Settings are rebuilt rarely, read often)."""
    return ForwardPolicy.of(patterns)
