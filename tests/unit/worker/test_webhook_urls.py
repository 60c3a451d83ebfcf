"""Which webhook URLs Tome refuses at submission: address forms that ``is_global`` lets through, URL syntax
that http.client would choke on at delivery, and ports. IP literals only, so nothing here needs DNS."""

from __future__ import annotations

import ipaddress

import pytest

from worker import webhooks
from worker.webhooks import WebhookRefused, check_url


def no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"resolved {host!r}: these tests use IP literals only")


# Each of these is_global (or was treated as public) before; each reaches somewhere a tenant must not.
GAPS = [
    "::127.0.0.1",  # IPv4-compatible
    "::a00:1",  # IPv4-compatible, 10.0.0.1
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254 (cloud metadata)
    "64:ff9b:1::a00:1",  # local-use NAT64 prefix
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "ff02::1",  # multicast
    "ff0e::1",  # multicast, global scope
    "224.0.0.1",
    "239.255.255.250",
    "3fff::1",  # documentation (RFC 9637)
    "192.0.0.9",  # IETF protocol assignments
    "192.88.99.1",  # 6to4 relay anycast
]

NOT_PUBLIC = [
    *GAPS,
    "::ffff:127.0.0.1",
    "::ffff:7f00:1",
    "::ffff:0:7f00:1",  # IPv4-translated
    "2001:0:7f00:1::1",  # Teredo, server 127.0.0.1
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo with a public server: still not unicast to it
    "127.0.0.1",
    "127.255.255.254",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "192.0.2.1",  # documentation
    "198.51.100.7",
    "203.0.113.9",
    "2001:db8::1",
    "0.0.0.0",
    "::",
    "::1",
    "240.0.0.1",  # reserved
    "255.255.255.255",
    "100.64.0.1",  # shared address space
    "100.127.255.254",
    "198.18.0.1",  # benchmarking
    "198.19.255.255",
    "2001:2::1",  # benchmarking
    "fe80::1",
    "fe80::1%eth0",
    "fc00::1",
    "fd12:3456::1",
    "fec0::1",  # site-local
]

PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "2606:4700:4700::1111",
    "2a00:1450:4001:830::200e",
    "2002:808:808::1",  # 6to4 of a public address
    "64:ff9b::808:808",  # NAT64 of a public address (IPv6-only hosts behind DNS64)
    "::ffff:8.8.8.8",  # IPv4-mapped: judged as the IPv4 address it is
]


def url_for(address: str) -> str:
    host = f"[{address.replace('%', '%25')}]" if ":" in address else address
    return f"http://{host}/hook"


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_is_public_refuses_every_non_global_unicast_form(address: str) -> None:
    assert not webhooks.is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_is_public_accepts_global_unicast(address: str) -> None:
    assert webhooks.is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", GAPS)
def test_check_url_refuses_addresses_that_is_global_lets_through(address: str) -> None:
    with pytest.raises(WebhookRefused, match="public"):
        check_url(url_for(address), allow_private=False, resolver=no_dns)


def test_embedded_ipv4_addresses_are_found() -> None:
    def inner(address: str) -> list[str]:
        return [str(a) for a in webhooks.embedded_ipv4(ipaddress.IPv6Address(address))]

    assert inner("::ffff:127.0.0.1") == ["127.0.0.1"]
    assert inner("::10.0.0.1") == ["10.0.0.1"]
    assert inner("64:ff9b::7f00:1") == ["127.0.0.1"]
    assert inner("2002:7f00:1::1") == ["127.0.0.1"]
    assert inner("2001:0:4136:e378:8000:63bf:3fff:fdd2") == ["65.54.227.120", "192.0.2.45"]
    assert inner("2606:4700:4700::1111") == []


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/ho\tok",  # urlsplit drops it; http.client then raised InvalidURL at delivery
        "http://127.0.0.1/\thook",
        "http://127.0.\t0.1/hook",
        "http://127.0.0.1/a\nb",
        "http://127.0.0.1/a\rb",
        "http://127.0.0.1/a b",
        " http://127.0.0.1/hook",
        "http://127.0.0.1/hook ",
        "http://127.0.0.1/\x00",
        "http://127.0.0.1/\x1b[31m",
        "http://127.0.0.1/\x7f",
        "http://127.0.0.1/\x85",
        "http://127.0.0.1/\u00a0",  # no-break space
        "http://127.0.0.1/\u200b",  # zero-width space
        "http://127.0.0.1/\u202e",  # right-to-left override
        "http://127.0.0.1/\u2028",  # line separator
        "http://127.0.0.1/\u3000",  # ideographic space
    ],
)
def test_whitespace_and_control_characters_are_refused(url: str) -> None:
    with pytest.raises(WebhookRefused, match="whitespace or control"):
        check_url(url, allow_private=True, resolver=no_dns)


@pytest.mark.parametrize(
    "url",
    [
        "http://@127.0.0.1/hook",  # empty userinfo
        "http://[::1/hook",  # urlsplit raises ValueError: a 500 before, not a refusal
        "http://127.0.0.1:99999/hook",
        "http://127.0.0.1:http/hook",
        "http://" + "\u00fc" * 64 + ".example/hook",  # a label too long to IDNA-encode
        "http://a..b/hook",
        "http://exa$mple.org/hook",
        "http://%31%32%37.0.0.1/hook",
        "http://[fe80::1%25eth0]/hook",  # a zone index: link-scoped
    ],
)
def test_malformed_urls_are_refused_even_when_private_addresses_are_allowed(url: str) -> None:
    with pytest.raises(WebhookRefused):
        check_url(url, allow_private=True, resolver=no_dns)


def test_idna_hosts_are_accepted() -> None:
    check_url("https://b\u00fccher.example/hook", allow_private=True, resolver=no_dns)
    check_url("https://B\u00dcCHER.example./hook#fragment", allow_private=True, resolver=no_dns)


def test_only_ports_80_and_443_unless_widened() -> None:
    for ok in ["http://8.8.8.8/", "http://8.8.8.8:80/", "https://8.8.8.8:443/", "http://8.8.8.8:443/"]:
        check_url(ok, allow_private=False, resolver=no_dns)
    for port in [0, 22, 25, 6379, 8080, 8443]:
        with pytest.raises(WebhookRefused, match=f"port {port} is not allowed"):
            check_url(f"http://8.8.8.8:{port}/", allow_private=False, resolver=no_dns)
    wide = frozenset({80, 443, 8443})
    check_url("https://8.8.8.8:8443/", allow_private=False, allowed_ports=wide, resolver=no_dns)
    with pytest.raises(WebhookRefused, match="port 8080"):
        check_url("https://8.8.8.8:8080/", allow_private=False, allowed_ports=wide, resolver=no_dns)
    narrow = frozenset({8443})
    check_url("https://8.8.8.8/", allow_private=False, allowed_ports=narrow, resolver=no_dns)
    with pytest.raises(WebhookRefused, match="port 80 "):
        check_url("https://8.8.8.8:80/", allow_private=False, allowed_ports=narrow, resolver=no_dns)


def test_allow_private_allows_any_port_unless_ports_are_given() -> None:
    check_url("http://127.0.0.1:54321/hook", allow_private=True, resolver=no_dns)
    with pytest.raises(WebhookRefused, match="port 54321"):
        check_url("http://127.0.0.1:54321/", allow_private=True, allowed_ports=frozenset(), resolver=no_dns)
    with pytest.raises(WebhookRefused, match="port 0"):
        check_url("http://127.0.0.1:0/hook", allow_private=True, resolver=no_dns)


def test_names_are_resolved_with_the_given_resolver_and_every_answer_is_checked() -> None:
    asked: list[tuple[str, int]] = []

    def answers(*addresses: str) -> webhooks.Resolver:
        def resolver(host: str, port: int) -> list[str]:
            asked.append((host, port))
            return list(addresses)

        return resolver

    check_url("https://hooks.example/x", allow_private=False, resolver=answers("8.8.8.8", "2606:4700::1"))
    assert asked == [("hooks.example", 443)]
    with pytest.raises(WebhookRefused, match="only to public addresses"):
        check_url("http://hooks.example/x", allow_private=False, resolver=answers("8.8.8.8", "10.0.0.1"))
    with pytest.raises(WebhookRefused, match="only to public addresses"):
        check_url("http://hooks.example/x", allow_private=False, resolver=answers())

    def nxdomain(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    with pytest.raises(WebhookRefused) as refused:
        check_url("http://internal.example/x", allow_private=False, resolver=nxdomain)
    assert str(refused.value) == "webhook_url host must resolve, and only to public addresses", (
        "the same words as for a private answer: no probe of internal DNS"
    )
