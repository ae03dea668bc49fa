"""What a node is asked to compress its answers with (INDEXER_RPC_COMPRESSION): gzip only from a
node that is neither on this machine nor on a private network (`accepted_encoding`)."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

# How long a name that did not resolve is taken for far away before "auto" tries it again.
UNDECIDED_SECONDS = 60.0

# What INDEXER_RPC_COMPRESSION asks the node for (`accepted_encoding`).
COMPRESSIONS = ("auto", "gzip", "none")


def checked(compression: str) -> str:
    """`compression` if it is one of COMPRESSIONS; a ValueError naming them otherwise."""
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)}, not {compression!r}")
    return compression


def accepted_encoding(url: str, compression: str) -> str | None:
    """The Accept-Encoding the node at `url` is sent: "gzip" or "identity"; None while "auto"
    cannot tell (the host's name does not resolve): the endpoint asks for gzip meanwhile and
    tries again UNDECIDED_SECONDS later (`rpc_transport.Endpoint`).

    go-ethereum and Erigon gzip every answer whose request accepts it, and requests accepts it by
    default. A mainnet block's answers, 1.5 MB of JSON, then cost the node about 30 ms of CPU to
    compress and the worker 6 to 7 ms to inflate, 1.7x its whole CPU a block
    (BENCHMARKS.md, "Answers gzipped only from a node far away"): worth it across the internet,
    where they shrink to a third, and not from this machine or a private network, where bytes
    are cheaper than CPU. So "auto" asks for gzip only from a node that is neither (`_nearby`)."""
    if checked(compression) == "auto":
        nearby = _nearby(urlsplit(url).hostname)
        return None if nearby is None else "identity" if nearby else "gzip"
    return "gzip" if compression == "gzip" else "identity"


# This machine and the private networks: loopback, RFC 1918, link-local, IPv6's unique local
# addresses. (Python's `is_private` also takes documentation, benchmarking and reserved ranges,
# and 2001::/23, Teredo's among them.)
_NEARBY = [ipaddress.ip_network(n) for n in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                             "169.254.0.0/16", "::1/128", "fc00::/7", "fe80::/10",
                                             "0.0.0.0/32", "::/128")]  # (a listen address copied: this machine)


def _nearby(host: str | None) -> bool | None:
    """Whether `host` is this machine or on a private network (`_NEARBY`): an address there, or
    a name whose every address is (a Docker or Kubernetes service's); None for a name that does
    not resolve."""
    if not host:
        return False
    host = host.rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError):
            return None
        # An IPv6 address may carry its zone ("fe80::1%eth0").
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found]
    # An IPv4 address written as IPv6 (::ffff:10.0.0.1) is where its IPv4 address is.
    addresses = [getattr(a, "ipv4_mapped", None) or a for a in addresses]
    return bool(addresses) and all(any(a in net for net in _NEARBY) for a in addresses)
