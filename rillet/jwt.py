"""NATS JWT (v2) codec: the signed claims documents of decentralized ("operator mode") security.

A token is three base64url (unpadded) parts joined by dots: the header
``{"typ":"JWT","alg":"ed25519-nkey"}``, the JSON claims, and an Ed25519 signature over
``header.payload`` made by the nkey named in the claims' ``iss``.  The ``jti`` claim is a
base32 digest of the standard claims (computed with ``jti`` left out), as the Go library does.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import re
import time
from typing import Any

from rillet.nkey import PREFIX_BYTES, decode_public_nkey, verify_signature

ALG_V2 = "ed25519-nkey"
ALG_V1 = "ed25519"

# claim types (nats.type)
OPERATOR = "operator"
ACCOUNT = "account"
USER = "user"
ACTIVATION = "activation"
AUTH_REQUEST = "authorization_request"
AUTH_RESPONSE = "authorization_response"

_STD_ORDER = ("aud", "exp", "jti", "iat", "iss", "name", "nbf", "sub")


class JwtError(Exception):
    """Any problem decoding, verifying or validating a JWT."""


def _b64enc(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _b64dec(s: str) -> bytes:
    if not isinstance(s, str) or not re.fullmatch(r"[A-Za-z0-9_\-]*", s):
        raise JwtError("invalid base64url encoding")
    try:
        return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except (binascii.Error, ValueError) as e:
        raise JwtError(f"invalid base64url encoding: {e}") from None


def _compact(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _jti(claims: dict) -> str:
    std = {k: claims[k] for k in _STD_ORDER if k != "jti" and claims.get(k) not in (None, "", 0)}
    import hashlib  # (SHA-512/256 is OpenSSL's; loaded when a JWT is made, not with the server: rillet.digest)
    h = hashlib.new("sha512_256", _compact(std)).digest()
    return base64.b32encode(h).decode().rstrip("=")


# ---------------------------------------------------------------- nkeys helpers (the key codec: rillet.nkey)


def is_public_key(pub: Any, kind: str | None = None) -> bool:
    """True if ``pub`` is a well-formed public nkey (of the given kind letter(s) when set, e.g. "A" or "OA")."""
    if not isinstance(pub, str) or len(pub) != 56:
        return False
    if kind is not None and pub[0] not in kind:
        return False
    if pub[0] not in PREFIX_BYTES:
        return False
    return decode_public_nkey(pub) is not None


def new_keypair(kind: str):
    """A fresh nkeys KeyPair of the given kind letter ("O", "A", "U", "N")."""
    import nkeys
    seed = nkeys.encode_seed(os.urandom(32), PREFIX_BYTES[kind])
    return nkeys.from_seed(seed)


def public_key(kp) -> str:
    """The public nkey of a key pair: an nkeys KeyPair (``public_key`` bytes) or a ``rillet.nkey.KeyPair``."""
    pk = kp.public_key
    if callable(pk):
        pk = pk()
    return pk.decode() if isinstance(pk, bytes) else pk


# ---------------------------------------------------------------- encode / decode

def encode(claims: dict, kp) -> str:
    """Sign ``claims`` with the nkeys KeyPair ``kp``; fills ``iss``, ``iat`` (when missing) and ``jti``."""
    if not claims.get("sub"):
        raise JwtError("subject is not set")
    c = dict(claims)
    c["iss"] = public_key(kp)
    if not c.get("iat"):
        c["iat"] = int(time.time())
    c.pop("jti", None)
    nats = c.get("nats")
    if isinstance(nats, dict):
        nats = dict(nats)
        nats.setdefault("version", 2)
        c["nats"] = nats
    c["jti"] = _jti(c)
    # standard claims first, in the Go library's order
    ordered = {k: c[k] for k in _STD_ORDER if k in c and c[k] not in (None, "")}
    for k, v in c.items():
        if k not in ordered and v is not None:
            ordered[k] = v
    header = _b64enc(_compact({"typ": "JWT", "alg": ALG_V2}))
    payload = _b64enc(_compact(ordered))
    signing_input = f"{header}.{payload}".encode()
    sig = kp.sign(signing_input)
    return f"{header}.{payload}.{_b64enc(sig)}"


def _split(token: str) -> tuple[str, str, str]:
    if not isinstance(token, str):
        raise JwtError("expected a string token")
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise JwtError("expected 3 chunks")
    return parts[0], parts[1], parts[2]


def _json_object(part: str, what: str) -> dict:
    """A token part decoded (base64url, then JSON), which must be an object; else ``invalid <what>``."""
    try:
        obj = json.loads(_b64dec(part))
    except (ValueError, UnicodeDecodeError):
        raise JwtError(f"invalid {what}") from None
    if not isinstance(obj, dict):
        raise JwtError(f"invalid {what}")
    return obj


def _check_header(h: str) -> None:
    header = _json_object(h, "header")
    typ = header.get("typ")
    if not isinstance(typ, str) or typ.upper() != "JWT":
        raise JwtError(f'not supported type "{typ}"')
    alg = header.get("alg")
    if not isinstance(alg, str) or alg.lower() not in (ALG_V1, ALG_V2):
        raise JwtError(f'unexpected "{alg}" algorithm')


def decode_unverified(token: str) -> dict:
    """The claims of ``token`` after checking its header, without checking the signature."""
    h, p, _s = _split(token)
    _check_header(h)
    return _json_object(p, "claims")


def decode(token: str) -> dict:
    """Verify ``token``'s header and signature (against its ``iss``) and return its claims."""
    h, p, s = _split(token)
    claims = decode_unverified(token)
    iss = claims.get("iss")
    if not is_public_key(iss):
        raise JwtError("claim failed V2 signature verification" if iss else "claim has no issuer")
    sig = _b64dec(s)
    nats = claims.get("nats")
    if nats is not None and not isinstance(nats, dict):
        raise JwtError("invalid claims")
    if claims.get("type"):
        # a v1 token: the type sits at the top level and only the payload chunk is signed
        if not verify_signature(iss, p.encode(), sig):
            raise JwtError("claim failed V1 signature verification")
        nats = dict(nats or {})
        nats.setdefault("type", claims["type"])
        nats.setdefault("version", 1)
        for k in ("tags", "issuer_account"):
            if k in claims and k not in nats:
                nats[k] = claims[k]
        claims["nats"] = nats
        return claims
    if not verify_signature(iss, f"{h}.{p}".encode(), sig):
        raise JwtError("claim failed V2 signature verification")
    return claims


def claim_type(claims: dict) -> str:
    nats = claims.get("nats") or {}
    t = nats.get("type") if isinstance(nats, dict) else None
    return t or claims.get("type") or ""


def nats_section(claims: dict) -> dict:
    n = claims.get("nats")
    return n if isinstance(n, dict) else {}


# ---------------------------------------------------------------- time validity

def is_expired(claims: dict, now: float | None = None) -> bool:
    exp = claims.get("exp") or 0
    if not isinstance(exp, (int, float)) or exp <= 0:
        return False
    return (time.time() if now is None else now) > exp


def not_yet_valid(claims: dict, now: float | None = None) -> bool:
    nbf = claims.get("nbf") or 0
    if not isinstance(nbf, (int, float)) or nbf <= 0:
        return False
    return nbf > (time.time() if now is None else now)


def check_times(claims: dict, now: float | None = None) -> None:
    """Raise JwtError when the claim is expired or not yet valid."""
    if is_expired(claims, now):
        raise JwtError("claim is expired")
    if not_yet_valid(claims, now):
        raise JwtError("claim is not yet valid")


# ---------------------------------------------------------------- .creds files

_CREDS_BLOCK = re.compile(r"^\s*-{3,}[^\n]*-{3,}\s*\r?\n\s*([A-Za-z0-9_\-.=]+)\s*\r?\n\s*-{3,}[^\n]*-{3,}\s*$",
                          re.MULTILINE)


def parse_creds(text: str | bytes) -> tuple[str, str]:
    """Return (jwt, seed) from a .creds file's text: the first two dashed blocks."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    blocks = _CREDS_BLOCK.findall(text)
    if len(blocks) < 2:
        raise JwtError("unable to parse creds file: expected a JWT and a seed section")
    return blocks[0], blocks[1]


def format_creds(jwt_token: str, seed: str | bytes) -> str:
    """Render a user JWT and seed as a .creds file."""
    if isinstance(seed, bytes):
        seed = seed.decode()
    return ("-----BEGIN NATS USER JWT-----\n" f"{jwt_token}\n" "------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
            "-----BEGIN USER NKEY SEED-----\n" f"{seed}\n" "------END USER NKEY SEED------\n\n"
            "*************************************************************\n")


def extract_jwt(text: str | bytes) -> str:
    """The JWT in a file's text: the first dashed block when it has one, else the trimmed text itself."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    m = re.search(r"-{3,}[^\n]*-{3,}\s*\r?\n\s*([A-Za-z0-9_\-.=]+)\s*\r?\n\s*-{3,}", text)
    if m:
        return m.group(1)
    return text.strip()
