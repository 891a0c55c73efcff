"""Unit tests for the NATS JWT codec (rillet/jwt.py) and the public nkey codec (rillet/nkey.py)."""
import base64
import json
import time

import pytest

from rillet import jwt, nkey


def _b64(obj) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


def test_round_trip_fills_issuer_iat_and_jti():
    okp = jwt.new_keypair("O")
    akp = jwt.new_keypair("A")
    apub = jwt.public_key(akp)
    tok = jwt.encode({"sub": apub, "name": "A", "nats": {"type": "account", "limits": {"conn": 3}}}, okp)
    c = jwt.decode(tok)
    assert c["iss"] == jwt.public_key(okp)
    assert c["sub"] == apub
    assert c["nats"] == {"type": "account", "limits": {"conn": 3}, "version": 2}
    assert abs(c["iat"] - time.time()) < 5
    assert len(c["jti"]) == 52  # base32 of a 32-byte digest, unpadded
    header = json.loads(base64.urlsafe_b64decode(tok.split(".")[0] + "=="))
    assert header == {"typ": "JWT", "alg": "ed25519-nkey"}
    assert jwt.claim_type(c) == "account"


def test_jti_is_deterministic_for_same_claims():
    kp = jwt.new_keypair("O")
    a = jwt.decode(jwt.encode({"sub": "X", "iat": 100, "nats": {"type": "operator"}}, kp))
    b = jwt.decode(jwt.encode({"sub": "X", "iat": 100, "nats": {"type": "operator"}}, kp))
    c = jwt.decode(jwt.encode({"sub": "Y", "iat": 100, "nats": {"type": "operator"}}, kp))
    assert a["jti"] == b["jti"] != c["jti"]


def test_tampered_payload_rejected():
    kp = jwt.new_keypair("A")
    tok = jwt.encode({"sub": "UABC", "nats": {"type": "user", "pub": {"allow": ["a"]}}}, kp)
    h, p, s = tok.split(".")
    claims = json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
    claims["nats"]["pub"]["allow"] = [">"]
    with pytest.raises(jwt.JwtError, match="signature"):
        jwt.decode(f"{h}.{_b64(claims)}.{s}")
    # the unverified decode still reads it
    assert jwt.decode_unverified(f"{h}.{_b64(claims)}.{s}")["nats"]["pub"]["allow"] == [">"]


def test_tampered_signature_and_wrong_issuer_rejected():
    kp = jwt.new_keypair("A")
    tok = jwt.encode({"sub": "UABC"}, kp)
    h, p, s = tok.split(".")
    bad = bytearray(base64.urlsafe_b64decode(s + "=="))
    bad[0] ^= 1
    with pytest.raises(jwt.JwtError):
        jwt.decode(f"{h}.{p}.{base64.urlsafe_b64encode(bytes(bad)).decode().rstrip('=')}")
    # claims re-issued under another key, keeping the first signature
    other = jwt.new_keypair("A")
    claims = jwt.decode(tok)
    claims["iss"] = jwt.public_key(other)
    with pytest.raises(jwt.JwtError):
        jwt.decode(f"{h}.{_b64(claims)}.{s}")


def test_wrong_alg_and_type_rejected():
    kp = jwt.new_keypair("A")
    tok = jwt.encode({"sub": "UABC"}, kp)
    _h, p, s = tok.split(".")
    with pytest.raises(jwt.JwtError, match="algorithm"):
        jwt.decode(f"{_b64({'typ': 'JWT', 'alg': 'HS256'})}.{p}.{s}")
    with pytest.raises(jwt.JwtError, match="type"):
        jwt.decode(f"{_b64({'typ': 'XYZ', 'alg': 'ed25519-nkey'})}.{p}.{s}")
    for junk in ("", "a.b", "a.b.c.d", "!!.??.**", 42):
        with pytest.raises(jwt.JwtError):
            jwt.decode(junk)


def test_expiry_and_not_before():
    kp = jwt.new_keypair("A")
    now = time.time()
    expired = jwt.decode(jwt.encode({"sub": "U", "exp": int(now) - 10}, kp))
    assert jwt.is_expired(expired)
    with pytest.raises(jwt.JwtError, match="expired"):
        jwt.check_times(expired)
    future = jwt.decode(jwt.encode({"sub": "U", "nbf": int(now) + 100}, kp))
    assert jwt.not_yet_valid(future)
    with pytest.raises(jwt.JwtError, match="not yet valid"):
        jwt.check_times(future)
    ok = jwt.decode(jwt.encode({"sub": "U", "exp": int(now) + 100, "nbf": int(now) - 100}, kp))
    jwt.check_times(ok)
    assert jwt.is_expired(ok, now=now + 200)


def test_encode_requires_subject():
    with pytest.raises(jwt.JwtError):
        jwt.encode({"name": "x"}, jwt.new_keypair("A"))


def test_creds_round_trip():
    ukp = jwt.new_keypair("U")
    tok = jwt.encode({"sub": jwt.public_key(ukp), "nats": {"type": "user"}}, jwt.new_keypair("A"))
    text = jwt.format_creds(tok, ukp.seed)
    got_jwt, got_seed = jwt.parse_creds(text)
    assert got_jwt == tok
    assert got_seed == ukp.seed.decode()
    assert jwt.parse_creds(text.replace("\n", "\r\n")) == (tok, ukp.seed.decode())
    with pytest.raises(jwt.JwtError):
        jwt.parse_creds("nothing here")


def test_is_public_key():
    a = jwt.public_key(jwt.new_keypair("A"))
    assert jwt.is_public_key(a, "A")
    assert not jwt.is_public_key(a, "O")
    assert not jwt.is_public_key(a[:-1] + ("A" if a[-1] != "A" else "B"))
    assert not jwt.is_public_key("ABC")


def test_public_nkey_codec_and_signatures():
    kp = jwt.new_keypair("U")
    pub = jwt.public_key(kp)
    raw = nkey.decode_public_nkey(pub)
    assert raw is not None and len(raw) == 32
    assert nkey.encode_public_nkey(nkey.PREFIX_BYTES["U"], raw) == pub
    assert nkey.encode_public_nkey(nkey.PREFIX_BYTES["A"], raw)[0] == "A"
    bad_crc = pub[:-1] + ("A" if pub[-1] != "A" else "B")
    for bad in (bad_crc, pub[:-2], "", None, 42, "U" + "!" * 55):
        assert nkey.decode_public_nkey(bad) is None, bad
    sig = kp.sign(b"nonce")
    assert nkey.verify_signature(pub, b"nonce", sig)
    assert not nkey.verify_signature(pub, b"other", sig)
    assert not nkey.verify_signature(jwt.public_key(jwt.new_keypair("U")), b"nonce", sig)
    assert not nkey.verify_signature(bad_crc, b"nonce", sig)
    assert not nkey.verify_signature(pub, b"nonce", sig[:-1])


def test_v1_token_signed_over_payload_only():
    kp = jwt.new_keypair("A")
    claims = {"jti": "X", "iat": 1, "iss": jwt.public_key(kp), "sub": "UXYZ", "type": "user",
              "nats": {"pub": {}, "sub": {}}}
    h = _b64({"typ": "jwt", "alg": "ed25519"})
    p = _b64(claims)
    s = base64.urlsafe_b64encode(kp.sign(p.encode())).decode().rstrip("=")
    c = jwt.decode(f"{h}.{p}.{s}")
    assert c["nats"]["type"] == "user" and c["nats"]["version"] == 1
    with pytest.raises(jwt.JwtError, match="V1"):
        jwt.decode(f"{h}.{_b64(dict(claims, sub='UOTHER'))}.{s}")


def test_extract_jwt_from_dashed_file():
    tok = jwt.encode({"sub": "O", "nats": {"type": "operator"}}, jwt.new_keypair("O"))
    text = f"-----BEGIN TEST OPERATOR JWT-----\n{tok}\n------END TEST OPERATOR JWT------\n"
    assert jwt.extract_jwt(text) == tok
    assert jwt.extract_jwt(f"  {tok}\n") == tok
