"""The one way Chronicle sends anything off its process: an egress-checked HTTP client.

Invariants:
- Locality is decided from the endpoint's literal host, before any DNS: `localhost` (and
  `*.localhost`) or an IP address in loopback, private, link-local or carrier-grade NAT space is
  local; every other host, names included, is remote. A remote endpoint is refused unless its
  `allow_remote` setting says otherwise, and a refused host name is never resolved.
- The environment's proxy (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY) is never used for a local endpoint,
  and for a remote one only when `egress.allow_env_proxy` is set. Nothing else is taken from the
  environment either (no netrc credentials).
- Redirects are not followed: a 3xx answer is a failure naming where it pointed, so a server
  cannot bounce conversation text to another host.
- A failed exchange is an `EgressFailed` (a ConnectionError): callers need not know the client.
  httpx is imported on first use, not when Chronicle is imported.
"""

from __future__ import annotations

import ipaddress
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .errors import ChronicleRuntimeError, EgressRefused

if TYPE_CHECKING:
    import httpx

__all__ = [
    "EgressRefused",
    "EgressFailed",
    "Route",
    "host_of",
    "endpoint_is_local",
    "route",
    "post_json",
]


class EgressFailed(ChronicleRuntimeError, ConnectionError):
    """The endpoint could not be reached, answered with an error or a redirect, or sent no JSON."""


_LOCAL_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "127.0.0.0/8",  # loopback
        "10.0.0.0/8",  # RFC 1918
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",  # link-local
        "100.64.0.0/10",  # carrier-grade NAT / overlay networks on the user's own machines
        "::1/128",
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
    )
)

_PROXY_VARIABLES = (
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
)


def host_of(url: str) -> str:
    """The literal host of `url` ("" when it has none or does not parse)."""
    try:
        return urlsplit(url.strip()).hostname or ""
    except ValueError:
        return ""


def _address_is_local(host: str) -> bool:
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in net for net in _LOCAL_NETWORKS if net.version == ip.version)


def endpoint_is_local(url: str) -> bool:
    """True when `url`'s literal host is this machine or its private network. No DNS: a name
    other than localhost is remote, whatever it would resolve to."""
    host = host_of(url).lower().rstrip(".")
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    return _address_is_local(host)


@dataclass(frozen=True, slots=True)
class Route:
    """How a request to an endpoint goes out: directly, or through `proxy`."""

    url: str
    local: bool
    proxy: str | None = None


def _environment_proxy(url: str, environ: Mapping[str, str]) -> str | None:
    scheme = urlsplit(url).scheme.lower()
    order = ("HTTPS_PROXY", "ALL_PROXY") if scheme == "https" else ("HTTP_PROXY", "ALL_PROXY")
    for name in order:
        value = environ.get(name) or environ.get(name.lower())
        if value:
            return value
    return None


def route(
    url: str,
    *,
    allow_remote: bool,
    allow_env_proxy: bool = False,
    setting: str = "allow_remote",
    environ: Mapping[str, str] | None = None,
) -> Route:
    """The route for `url`, or EgressRefused (raised before anything is resolved or sent)."""
    host = host_of(url)
    if not host or urlsplit(url).scheme.lower() not in ("http", "https"):
        raise EgressRefused(f"{url!r} is not an http(s) URL with a host; fix it in config.yaml")
    if endpoint_is_local(url):
        return Route(url, local=True)
    if not allow_remote:
        raise EgressRefused(
            f"{host} is off this host and its private network, and what would be sent there is "
            f"conversation content; set chronicle.{setting}: true to allow it (a host name counts "
            "as remote: give a private address by number to keep it local)"
        )
    proxy = _environment_proxy(url, os.environ if environ is None else environ)
    if proxy is not None and not allow_env_proxy:
        proxy = None  # the environment's proxy is not ours to use unless the operator says so
    return Route(url, local=False, proxy=proxy)


_clients: dict[str | None, httpx.Client] = {}
_clients_lock = threading.Lock()


def _client(proxy: str | None) -> httpx.Client:
    import httpx

    with _clients_lock:
        client = _clients.get(proxy)
        if client is None:
            client = httpx.Client(trust_env=False, follow_redirects=False, proxy=proxy)
            _clients[proxy] = client
        return client


def post_json(
    url: str,
    body: object,
    *,
    allow_remote: bool,
    allow_env_proxy: bool = False,
    setting: str = "allow_remote",
    headers: Mapping[str, str] | None = None,
    timeout: float,
) -> object:
    """POST `body` as JSON and return the decoded JSON answer. Raises EgressRefused before any
    lookup when the route is not allowed, EgressFailed when the exchange fails (a redirect
    included)."""
    import httpx

    way = route(url, allow_remote=allow_remote, allow_env_proxy=allow_env_proxy, setting=setting)
    try:
        response = _client(way.proxy).post(
            url, json=body, headers=dict(headers or {}), timeout=timeout
        )
    except httpx.HTTPError as exc:
        raise EgressFailed(f"{host_of(url)}: {exc or type(exc).__name__}") from exc
    if response.is_redirect:
        raise EgressFailed(
            f"{url} answered {response.status_code} pointing at "
            f"{response.headers.get('location', '?')!r}; redirects are not followed"
        )
    if response.is_error:
        raise EgressFailed(f"{url} answered {response.status_code} {response.reason_phrase}")
    try:
        return response.json()
    except ValueError as exc:
        raise EgressFailed(f"{url} did not answer with JSON ({exc})") from exc
