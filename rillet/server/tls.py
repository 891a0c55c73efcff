"""TLS contexts built from the tls {} configuration block."""
from __future__ import annotations

import ssl

from rillet.config.options import TLSConfig


def make_server_context(cfg: TLSConfig) -> ssl.SSLContext:
    """A server-side context: certificate and key, and client-certificate verification when asked."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if not cfg.cert_file or not cfg.key_file:
        raise ValueError("missing 'cert_file' or 'key_file' in TLS configuration")
    try:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"error parsing X509 certificate/key pair: {e}") from e
    if cfg.ca_file:
        try:
            ctx.load_verify_locations(cafile=cfg.ca_file)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"failed reading root CA file: {e}") from e
    if cfg.verify or cfg.verify_and_map:
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.ciphers:
        try:
            ctx.set_ciphers(":".join(cfg.ciphers))
        except ssl.SSLError:
            pass  # Go cipher-suite names; OpenSSL's defaults are used when they do not map
    return ctx
