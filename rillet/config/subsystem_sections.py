"""The tls, websocket, jetstream and cluster sections of a config file."""
from __future__ import annotations

from typing import Any, Callable

from rillet.gocompat.goquote import go_type
from rillet.config import options as defaults
from rillet.config.options import TLSConfig

from .builder_base import BuilderBase, storage_size
from .errors import ConfigError
from .ocsp_section import parse_ocsp, parse_ocsp_cache, parse_ocsp_peer
from .tls_names import check_cipher, check_curve, cipher_available, parse_min_version
from .typed import Field

TLS_HANDSHAKE_FIRST_FALLBACK = 0.05  # seconds, nats-server's "auto" fallback delay


class SubsystemSections(BuilderBase):
    """Needs ``parse_authorization`` / ``parse_permissions`` from AuthSections (see _Builder)."""

    def top_tls(self, f: Field) -> None:
        self.o.tls = self.parse_tls(f, client_side=True, where="client")
        self.o.tls.source = f.pos  # where nats-server reports a certificate it cannot load

    def top_ocsp(self, f: Field) -> None:
        """``ocsp``: stapling mode and URLs (see rillet.config.ocsp_section: stapling itself is refused
        when the file is read to its end and a certificate would be stapled)."""
        self.o.ocsp = parse_ocsp(f)

    def top_ocsp_cache(self, f: Field) -> None:
        """``ocsp_cache``: the cache of the responses of ocsp_peer checks."""
        self.o.ocsp_cache = parse_ocsp_cache(f)

    def parse_tls(self, f: Field, client_side: bool, where: str = "") -> TLSConfig:
        """A tls {} block. ``where``: "client" for the top-level block (the client port), "websocket",
        "cluster"...; settings that only the client port acts on are refused elsewhere."""
        tls = TLSConfig()
        tls.source = f.pos  # where nats-server reports a certificate it cannot load
        prefix = "error parsing tls config"

        def filename(attr: str) -> Callable[[Field], None]:
            def handler(sub: Field) -> None:
                if not isinstance(sub.value, str):
                    raise sub.error(f"{prefix}, expected '{sub.key}' to be filename")
                setattr(tls, attr, sub.value)
            return handler

        def boolean(sub: Field) -> bool:
            if not isinstance(sub.value, bool):
                raise sub.error(f"{prefix}, expected '{sub.key}' to be a boolean")
            return sub.value

        def set_bool(attr: str) -> Callable[[Field], None]:
            return lambda sub: setattr(tls, attr, boolean(sub))

        def verify_and_map(sub: Field) -> None:
            tls.verify_and_map = boolean(sub)
            tls.verify = tls.verify or tls.verify_and_map

        def check_known_urls(sub: Field) -> None:
            value = boolean(sub)
            if value and client_side:
                raise sub.error("verify_cert_and_check_known_urls not supported in this context")
            tls.verify = tls.verify or value
            tls.extra["verify_cert_and_check_known_urls"] = value

        insecure: list[str] = []

        def names(sub: Field, key: str, check: Callable[[str], Any]) -> list[str]:
            """The non-empty list of names ``key``, each passed by ``check`` (its ValueError: the error)."""
            if not isinstance(sub.value, list) or not sub.value:
                raise sub.error(f"{prefix}, '{key}' cannot be empty")
            values = []
            for item in sub.items():
                name = item.value if isinstance(item.value, str) else str(item.value)
                try:
                    check(name)
                except ValueError as e:
                    raise item.error(str(e)) from None
                values.append(name)
            return values

        def cipher_suites(sub: Field) -> None:
            tls.ciphers = names(sub, "cipher_suites", check_cipher)
            insecure.extend(n for n in tls.ciphers if check_cipher(n)[1])

        def curve_preferences(sub: Field) -> None:
            tls.curve_preferences = names(sub, "curve_preferences", check_curve)

        def min_version(sub: Field) -> None:
            try:
                tls.min_version = parse_min_version(sub.value)
            except ValueError as e:
                raise sub.error(f"{prefix}: {e}") from None

        def client_port_only(sub: Field) -> None:
            if where != "client":
                place = f"the {where}" if where else "this"
                raise sub.error(f"{prefix}, '{sub.key}' is not supported in {place} tls block "
                                "(only in the top-level tls block)")

        def rate_limit(sub: Field) -> None:
            client_port_only(sub)
            if isinstance(sub.value, bool) or not isinstance(sub.value, int):
                raise sub.error(f"{prefix}, 'connection_rate_limit' wrong type")
            tls.rate_limit = sub.value

        def cert_store(sub: Field) -> None:
            if not isinstance(sub.value, str) or not sub.value:
                raise sub.error("expected 'cert_store' to be a valid non-empty string")
            if sub.value.lower() in ("windowscurrentuser", "windowslocalmachine"):
                raise sub.error("cert_store not compatible with current operating system")
            raise sub.error("cert store type not implemented")

        def unsupported(why: str) -> Callable[[Field], None]:
            def handler(sub: Field) -> None:
                raise sub.error(f"{prefix}, '{sub.key}' is not supported: {why}")
            return handler

        def ocsp_peer(sub: Field) -> None:
            cfg = parse_ocsp_peer(sub)
            if cfg.verify and where in ("cluster", "gateway"):
                raise sub.error(f"{prefix}, 'ocsp_peer' is not supported in the {where} tls block: "
                                "nats-server does not check route or gateway peers with ocsp_peer (it "
                                "checks their stapled status, which needs stapling: see 'ocsp')")
            if where == "mqtt":
                raise sub.error(f"{prefix}, 'ocsp_peer' is not supported in the mqtt tls block: nats-server "
                                "does not use it (MQTT connections follow the top-level tls block's ocsp_peer, "
                                "as they do here)")
            if cfg.verify:
                try:
                    import cryptography.x509.ocsp  # noqa: F401  (what the checks are made with)
                except ImportError:
                    raise sub.error(f"{prefix}, 'ocsp_peer' needs the Python package 'cryptography', "
                                    "which is not installed") from None
            tls.ocsp_peer = cfg

        def pinned(sub: Field) -> None:
            if not isinstance(sub.value, list):
                raise sub.error(f"{prefix}, expected 'pinned_certs' to be a list of hex-encoded "
                                "sha256 of DER encoded SubjectPublicKeyInfo")
            certs = []
            for entry in sub.as_str_list():
                entry = entry.lower()
                if len(entry) != 64 or any(c not in "0123456789abcdef" for c in entry):
                    raise sub.error(f"{prefix}, 'pinned_certs' key {entry} does not look like "
                                    "hex-encoded sha256 of DER encoded SubjectPublicKeyInfo")
                certs.append(entry)
            tls.pinned_certs = certs

        def handshake_first(sub: Field) -> None:
            if where not in ("leafnodes", "leafnodes remote"):  # (as nats-server: the client port and leaf nodes)
                client_port_only(sub)
            value = sub.value
            if isinstance(value, bool):
                tls.handshake_first = value
                return
            if not isinstance(value, str):
                raise sub.error(f'field "{sub.key}" should be a boolean or a string, '
                                f"got {go_type(value)}")
            word = value.lower()
            if word in ("true", "on"):
                tls.handshake_first = True
            elif word in ("false", "off"):
                tls.handshake_first = False
            elif word in ("auto", "auto_fallback"):
                tls.handshake_first = True
                tls.handshake_first_fallback = TLS_HANDSHAKE_FIRST_FALLBACK
            else:
                try:
                    tls.handshake_first_fallback = sub.as_duration_string()
                except ConfigError:
                    raise sub.error(f'field "{sub.key}"\'s value "{value}" is invalid') from None
                tls.handshake_first = True

        def timeout(sub: Field) -> None:
            if where == "websocket":
                raise sub.error(f"{prefix}, 'timeout' is not supported in the websocket tls block "
                                "(the websocket handshake_timeout covers the TLS handshake)")
            tls.timeout = sub.as_seconds() or defaults.DEFAULT_TLS_TIMEOUT

        cert_store_only = unsupported("it selects a certificate of a Windows certificate store (cert_store)")
        table: dict[str, Callable[[Field], None]] = {
            "cert_file": filename("cert_file"),
            "key_file": filename("key_file"),
            "ca_file": filename("ca_file"),
            "insecure": set_bool("insecure"),
            "verify": set_bool("verify"),
            "verify_and_map": verify_and_map,
            "verify_cert_and_check_known_urls": check_known_urls,
            "allow_insecure_cipher_suites": set_bool("allow_insecure_ciphers"),
            "cipher_suites": cipher_suites,
            "curve_preferences": curve_preferences,
            "min_version": min_version,
            "timeout": timeout,
            "connection_rate_limit": rate_limit,
            "pinned_certs": pinned,
            "handshake_first": handshake_first,
            "first": handshake_first,
            "immediate": handshake_first,
            "cert_store": cert_store,
            "cert_match_by": cert_store_only,
            "cert_match": cert_store_only,
            "ca_certs_match": cert_store_only,
            "cert_match_skip_invalid": cert_store_only,
            "ocsp_peer": ocsp_peer,
            "certs": lambda sub: tls.certs.extend(parse_certs(sub)),
            "certificates": lambda sub: tls.certs.extend(parse_certs(sub)),
        }
        for sub in f.entries():
            handler = table.get(sub.name)
            if handler is None:
                raise sub.error(f'{prefix}, unknown field "{sub.key}"')
            handler(sub)
        if tls.certs and tls.cert_file:
            raise f.error(f"{prefix}, cannot combine 'cert_file' option with 'certs' option")
        if tls.ocsp_peer is not None and tls.ocsp_peer.verify and where in ("client", "leafnodes", "websocket") \
                and not tls.verify:
            raise f.error("OCSP peer verification for client connections requires TLS verify (mTLS) "
                          "to be enabled")
        if insecure and not tls.allow_insecure_ciphers:
            raise f.error("insecure cipher suites configured without 'allow_insecure_cipher_suites' option "
                          f"set: {', '.join(insecure)}")
        for name in tls.ciphers:
            try:
                cipher_available(name)
            except ValueError as e:
                raise f.error(f"{prefix}, {e}") from None
        return tls

    # -- websocket ------------------------------------------------------------

    def websocket(self, f: Field) -> None:
        if not isinstance(f.value, dict):
            raise f.error(f"Expected websocket to be a map, got {go_type(f.value)}")
        ws = self.o.websocket
        s = self.setter
        target = lambda: ws  # noqa: E731

        def listen(sub: Field) -> None:
            ws.host, ws.port = self.host_port(sub)

        def tls(sub: Field) -> None:
            ws.tls = self.parse_tls(sub, client_side=True, where="websocket")

        def origins(sub: Field) -> None:
            ws.allowed_origins = sub.as_str_list("allowed origins")

        def handshake_timeout(sub: Field) -> None:
            if isinstance(sub.value, int) and not isinstance(sub.value, bool):
                ws.handshake_timeout = float(sub.value)
            elif isinstance(sub.value, str):
                ws.handshake_timeout = sub.as_duration_string()
            else:
                raise sub.error(f"error parsing handshake timeout: unsupported type "
                                f"{type(sub.value).__name__}")

        def authorization(sub: Field) -> None:
            auth = self.simple_auth(sub)
            ws.username = auth.get("user", "")
            ws.password = auth.get("pass", "")
            ws.token = auth.get("token", "")
            ws.auth_timeout = auth.get("timeout", 0.0)

        def headers(sub: Field) -> None:
            values = {}
            for h in sub.entries():
                values[h.key] = h.as_str()
            ws.headers = values

        def extra_str(sub: Field) -> None:
            ws.extra[sub.name] = sub.as_str()

        def ping_interval(sub: Field) -> None:
            ws.extra["ping_interval"] = sub.as_duration(self.warnings)

        table = {
            **self.listener_keys(target, listen, authorization, tls),
            **self.typed_keys(target, no_tls="bool", same_origin="bool", jwt_cookie="str", no_auth_user="str"),
            "handshake_timeout": handshake_timeout,
            "compress": s("compression", "bool", target=target),
            "compression": s("compression", "bool", target=target),
            "authentication": authorization,
            "user_cookie": extra_str,
            "pass_cookie": extra_str,
            "token_cookie": extra_str,
            "headers": headers,
            "ping_interval": ping_interval,
        }
        for alias in ("allowed_origins", "allowed_origin", "allow_origins", "allow_origin",
                      "origins", "origin"):
            table[alias] = origins
        f.as_map()
        self.each(f, table, "websocket")

    def simple_auth(self, f: Field) -> dict[str, Any]:
        """user/pass/token/timeout only (websocket, mqtt, leafnode style)."""
        auth: dict[str, Any] = {}
        table = {
            "user": lambda sub: auth.__setitem__("user", sub.as_str()),
            "username": lambda sub: auth.__setitem__("user", sub.as_str()),
            "pass": lambda sub: auth.__setitem__("pass", sub.as_str()),
            "password": lambda sub: auth.__setitem__("pass", sub.as_str()),
            "token": lambda sub: auth.__setitem__("token", sub.as_str()),
            "timeout": lambda sub: auth.__setitem__("timeout", sub.as_seconds()),
        }
        f.as_map()
        self.each(f, table, "authorization")
        return auth

    # -- jetstream ------------------------------------------------------------

    def jetstream(self, f: Field) -> None:
        js = self.o.jetstream
        if isinstance(f.value, bool):
            js.enabled = f.value
            return
        if isinstance(f.value, str):
            word = f.value.lower()
            if word in ("enabled", "enable"):
                js.enabled = True
            elif word in ("disabled", "disable"):
                js.enabled = False
            else:
                raise f.error(f"Expected 'enabled' or 'disabled' for string value, got '{f.value}'")
            return
        if not isinstance(f.value, dict):
            raise f.error(f"Expected map, bool or string to define JetStream, got {go_type(f.value)}")
        enabled = True

        def store_dir(sub: Field) -> None:
            if self.store_dir_set:
                raise sub.error("Duplicate 'store_dir' configuration")
            self.store_dir_set = True
            js.store_dir = sub.as_str()

        def sync(sub: Field) -> None:
            if isinstance(sub.value, str) and sub.value.lower() == "always":
                js.sync_interval = "always"
            else:
                js.sync_interval = sub.as_duration(self.warnings)

        def size(attr: str, label: str) -> Callable[[Field], None]:
            def handler(sub: Field) -> None:
                setattr(js, attr, storage_size(sub, label))
            return handler

        def enable(sub: Field) -> None:
            nonlocal enabled
            enabled = sub.as_bool()

        def domain(sub: Field) -> None:
            js.domain = sub.as_str()

        def unique_tag(sub: Field) -> None:
            js.unique_tag = sub.as_str().strip().lower()

        def extra(sub: Field) -> None:
            js.extra[sub.name] = sub.value

        def refuse(reason: str) -> Callable[[Field], None]:
            def handler(sub: Field) -> None:
                raise sub.error(f'"{sub.key}" is not supported: {reason}')
            return handler

        table: dict[str, Callable[[Field], None]] = {
            "store": store_dir, "store_dir": store_dir, "storedir": store_dir,
            "sync": sync, "sync_interval": sync,
            "max_memory_store": size("max_memory_store", "max_mem_store"),
            "max_mem_store": size("max_memory_store", "max_mem_store"),
            "max_mem": size("max_memory_store", "max_mem_store"),
            "max_file_store": size("max_file_store", "max_file_store"),
            "max_file": size("max_file_store", "max_file_store"),
            "domain": domain,
            "enable": enable, "enabled": enable,
            "unique_tag": unique_tag,
        }
        table["strict"] = extra  # read by /varz (jetstream.config.strict)
        def enc_key(attr: str) -> Callable[[Field], None]:
            def handler(sub: Field) -> None:
                setattr(js, attr, sub.as_str())
            return handler

        def cipher(sub: Field) -> None:
            # nats-server: chacha | chachapoly | aes, any case; else "Unknown cipher type"
            low = sub.as_str().lower()
            if low in ("chacha", "chachapoly"):
                js.cipher = "chachapoly"
            elif low == "aes":
                js.cipher = "aes"
            else:
                raise sub.error(f'Unknown cipher type: "{sub.value}"')

        for key in ("key", "ek", "encryption_key"):
            table[key] = enc_key("key")
        for key in ("prev_key", "prev_ek", "prev_encryption_key"):
            table[key] = enc_key("prev_key")
        table["cipher"] = cipher
        def tpm(sub: Field) -> None:
            # nats-server's block (keys_file, encryption_password, srk_password, pcr, cipher), parsed and checked
            # as it parses it; with a keys_file the server then does not start JetStream, as nats-server on
            # any platform but Windows (rillet.server.server: "TPM functionality is not supported ...")
            if not isinstance(sub.value, dict):
                raise sub.error(f"Expected a map to define tpm, got {go_type(sub.value)}")
            opts: dict[str, Any] = {}
            for e in sub.entries():
                name = e.name
                if name in ("keys_file", "encryption_password", "srk_password"):
                    opts[name] = e.as_str()
                elif name == "pcr":
                    opts[name] = e.as_int()
                elif name == "cipher":
                    low = e.as_str().lower()
                    if low not in ("chacha", "chachapoly", "aes"):
                        raise e.error(f'Unknown cipher type: "{e.value}"')
                    opts[name] = "aes" if low == "aes" else "chachapoly"
                else:
                    raise e.error(f'unknown field "{e.key}"')
            js.tpm = opts

        table["tpm"] = tpm
        table["limits"] = lambda sub: self._jetstream_limits(sub, js)
        table["extension_hint"] = refuse("it tunes whether this server's JetStream extends another domain over "
                                         "leaf node connections, which Rillet never does (each side of a leaf "
                                         "connection keeps its own JetStream; the API crosses only as "
                                         "$JS.<domain>.API)")

        def max_catchup(sub: Field) -> None:
            # server-wide bytes of stream catch-up answers in flight (rillet.jetstream.cluster.catchup); 0 = the
            # default 64M; a negative size passes here and stops a clustered server at start, as nats-server
            js.extra["max_outstanding_catchup"] = storage_size(sub, sub.name)

        table["max_outstanding_catchup"] = max_catchup
        table["meta_compact"] = lambda sub: self._meta_compact(sub, js)
        table["meta_compact_size"] = lambda sub: self._meta_compact(sub, js)
        table["meta_compact_sync"] = lambda sub: self._meta_compact(sub, js)
        def queue_limit(sub: Field) -> None:
            # (rillet.jetstream.api.queue; nats-server: an int, 0 or less = the default 10,000)
            if isinstance(sub.value, bool) or not isinstance(sub.value, int):
                raise sub.error(f'Expected a parseable size for "{sub.key}", got {sub.value}')
            js.extra[sub.name] = sub.value

        table["request_queue_limit"] = queue_limit
        table["info_queue_limit"] = queue_limit
        # the stream ingest limits (rillet.jetstream.ingest; nats-server: a count, and a size as the store sizes)
        table["max_buffered_msgs"] = queue_limit

        def buffered_size(sub: Field) -> None:
            js.extra["max_buffered_size"] = storage_size(sub, "max_buffered_size")

        table["max_buffered_size"] = buffered_size
        def concurrent_io(sub: Field) -> None:
            # (rillet.jetstream.diskio: the loop's thread pool for blocking disk calls)
            v = sub.value
            if isinstance(v, bool) or not isinstance(v, int) or not 4 <= v <= 8192:
                raise sub.error(f'Expected an absolute size for "{sub.key}" between 4 and 8192, got {_go_v(v)}')
            js.extra["max_concurrent_io"] = v

        table["max_concurrent_io"] = concurrent_io
        self.each(f, table, "jetstream")
        js.enabled = enabled

    @staticmethod
    def _meta_compact(sub: Field, js: Any) -> None:
        """``meta_compact`` (entries) and ``meta_compact_size`` (bytes): the meta group's log is snapshotted and
        compacted once it holds more than that since its last snapshot (rillet.jetstream.cluster.meta; 0 or
        unset: Rillet's own threshold); ``meta_compact_sync``: whether those snapshots block (see below)."""
        name = sub.name
        if name == "meta_compact_sync":
            if not sub.as_bool():
                # nats-server takes its meta snapshots asynchronously unless this is true; Rillet always takes
                # them in line with the meta group's applies, i.e. what true asks for
                raise sub.error('"meta_compact_sync: false" (asynchronous meta snapshots) is not supported: '
                                "Rillet takes its meta snapshots in line, as nats-server with "
                                "meta_compact_sync: true; leave the setting out")
            js.extra[name] = True
            return
        if name == "meta_compact":
            v = sub.value
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise sub.error(f'Expected an absolute size for "{sub.key}", got {_go_v(v)}')
        else:
            v = storage_size(sub, name)
            if v < 0:
                raise sub.error(f'Expected an absolute size for "{sub.key}", got {_go_v(sub.value)}')
        js.extra[name] = v

    def _jetstream_limits(self, f: Field, js: Any) -> None:
        """``jetstream { limits { ... } }`` (nats-server JSLimitOpts) -> ``js.extra["limits"]``, a dict of
        the fields of rillet.jetstream.configtypes.ServerLimits (the JetStream manager builds that from it;
        config imports no runtime package), read by stream/consumer checks and batch publishing."""
        f.as_map()
        lim: dict[str, int] = {}
        js.extra["limits"] = lim

        def integer(attr: str) -> Callable[[Field], None]:
            def handler(sub: Field) -> None:
                lim[attr] = sub.as_int()
            return handler

        def duration(attr: str) -> Callable[[Field], None]:
            def handler(sub: Field) -> None:
                lim[attr] = int(round(sub.as_duration_string() * 1e9))
            return handler

        def batch(sub: Field) -> None:
            sub.as_map()
            self.each(sub, {"max_inflight_per_stream": integer("max_batch_inflight_per_stream"),
                            "max_inflight_total": integer("max_batch_inflight_total"),
                            "max_msgs": integer("max_batch_size"),
                            "timeout": duration("max_batch_timeout")}, "jetstream.limits.batch")

        self.each(f, {"max_ack_pending": integer("max_ack_pending"), "max_ha_assets": integer("max_ha_assets"),
                      "max_request_batch": integer("max_request_batch"),
                      "default_max_consumers": integer("default_max_consumers"),
                      "duplicate_window": duration("max_duplicate_window"), "batch": batch},
                  "jetstream.limits")

    # -- cluster --------------------------------------------------------------

    def cluster(self, f: Field) -> None:
        from rillet.config.cluster_section import parse_cluster
        parse_cluster(self, f)


def parse_certs(f: Field) -> list[tuple[str, str]]:
    """A tls block's ``certs`` (or ``certificates``): a list of ``{cert_file, key_file}`` maps, checked as
    nats-server checks them (string values only, both files named, no other field)."""
    bad = "error parsing certificates config"
    if not isinstance(f.value, list):
        raise f.error(f"{bad}: unsupported type {go_type(f.value)}")
    out: list[tuple[str, str]] = []
    for item in f.items():
        if not isinstance(item.value, dict):
            raise item.error(f"{bad}: unsupported type {go_type(item.value)}")
        files: dict[str, str] = {}
        first = None
        for e in item.entries():
            first = first or e
            if not isinstance(e.value, str):
                raise e.error(f"{bad}: unsupported type {go_type(e.value)}")
            if e.name not in ("cert_file", "key_file"):
                raise e.error(f'error parsing tls certs config, unknown field "{e.key}"')
            files[e.name] = e.value
        if not files.get("cert_file") or not files.get("key_file"):
            raise (first or item).error(f"{bad}: both 'cert_file' and 'cert_key' options are required")
        out.append((files["cert_file"], files["key_file"]))
    return out


def _go_v(v: Any) -> str:
    """A config value as Go's %v prints it (strings bare, booleans lower case)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
