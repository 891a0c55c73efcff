"""Go crypto/tls names in a tls {} block (cipher suites, curves, versions), checked the way nats-server
checks them and translated to OpenSSL's names. Pure: used by the config layer and by rillet.server.tls.

nats-server accepts the names of Go's tls.CipherSuites() and tls.InsecureCipherSuites() (the latter only
with allow_insecure_cipher_suites) and the curves of its curvePreferenceMap. TLS 1.3 suites are accepted
but, as in Go, not configurable.
"""
from __future__ import annotations

import ssl
from typing import Any

# Go crypto/tls cipher suite name -> (OpenSSL name, or None for a TLS 1.3 suite; insecure in Go's lists)
GO_CIPHER_SUITES: dict[str, tuple[str | None, bool]] = {
    # TLS 1.3 (not configurable, in Go as here)
    "TLS_AES_128_GCM_SHA256": (None, False),
    "TLS_AES_256_GCM_SHA384": (None, False),
    "TLS_CHACHA20_POLY1305_SHA256": (None, False),
    # tls.CipherSuites()
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": ("ECDHE-ECDSA-AES128-SHA", False),
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": ("ECDHE-ECDSA-AES256-SHA", False),
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": ("ECDHE-RSA-AES128-SHA", False),
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": ("ECDHE-RSA-AES256-SHA", False),
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": ("ECDHE-ECDSA-AES128-GCM-SHA256", False),
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": ("ECDHE-ECDSA-AES256-GCM-SHA384", False),
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": ("ECDHE-RSA-AES128-GCM-SHA256", False),
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": ("ECDHE-RSA-AES256-GCM-SHA384", False),
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": ("ECDHE-RSA-CHACHA20-POLY1305", False),
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": ("ECDHE-ECDSA-CHACHA20-POLY1305", False),
    # tls.InsecureCipherSuites(): need allow_insecure_cipher_suites
    "TLS_RSA_WITH_RC4_128_SHA": ("RC4-SHA", True),
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": ("DES-CBC3-SHA", True),
    "TLS_RSA_WITH_AES_128_CBC_SHA": ("AES128-SHA", True),
    "TLS_RSA_WITH_AES_256_CBC_SHA": ("AES256-SHA", True),
    "TLS_RSA_WITH_AES_128_CBC_SHA256": ("AES128-SHA256", True),
    "TLS_RSA_WITH_AES_128_GCM_SHA256": ("AES128-GCM-SHA256", True),
    "TLS_RSA_WITH_AES_256_GCM_SHA384": ("AES256-GCM-SHA384", True),
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": ("ECDHE-ECDSA-RC4-SHA", True),
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": ("ECDHE-RSA-RC4-SHA", True),
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": ("ECDHE-RSA-DES-CBC3-SHA", True),
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": ("ECDHE-ECDSA-AES128-SHA256", True),
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": ("ECDHE-RSA-AES128-SHA256", True),
}

# Go curve names (nats-server's curvePreferenceMap) -> OpenSSL group name (None: not in this OpenSSL)
GO_CURVES: dict[str, str | None] = {
    "X25519": "X25519",
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519MLKEM768": None,
    "SecP256r1MLKEM768": None,
    "SecP384r1MLKEM1024": None,
}

TLS_VERSIONS = {"1.0": (ssl.TLSVersion.TLSv1, "TLS 1.0"), "1.1": (ssl.TLSVersion.TLSv1_1, "TLS 1.1"),
                "1.2": (ssl.TLSVersion.TLSv1_2, "TLS 1.2"), "1.3": (ssl.TLSVersion.TLSv1_3, "TLS 1.3")}

def check_cipher(name: str) -> tuple[str | None, bool]:
    """(OpenSSL name or None for TLS 1.3, insecure) of a Go cipher suite name; ValueError (nats-server's
    wording) when unknown."""
    entry = GO_CIPHER_SUITES.get(name)
    if entry is None:
        raise ValueError(f"unrecognized cipher {name}")
    return entry


def cipher_available(name: str) -> str | None:
    """The OpenSSL name of a known Go cipher suite (None for TLS 1.3); ValueError when this server's
    OpenSSL lacks it (RC4 and 3DES in OpenSSL 3)."""
    ossl = check_cipher(name)[0]
    if ossl is not None:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(ossl)
        except ssl.SSLError:
            raise ValueError(f"cipher suite {name} is not available in this server's TLS library "
                             f"({ssl.OPENSSL_VERSION})") from None
    return ossl


def check_curve(name: str) -> str:
    """The OpenSSL group for a Go curve name; ValueError when unknown or unavailable."""
    if name not in GO_CURVES:
        raise ValueError(f"unrecognized curve preference {name}")
    group = GO_CURVES[name]
    if group is None:
        raise ValueError(f"curve preference {name} is not supported by this server's TLS library "
                         f"({ssl.OPENSSL_VERSION})")
    return group


def parse_min_version(value: Any) -> str:
    """A tls min_version value checked as nats-server checks it (ValueError with its wording)."""
    if not isinstance(value, str):
        raise ValueError(f"'min_version' wrong type: {value}")
    if value not in TLS_VERSIONS:
        raise ValueError(f"unknown version: {value}")
    if value in ("1.0", "1.1"):
        raise ValueError(f"unsupported TLS version: {TLS_VERSIONS[value][1]}")
    return value
