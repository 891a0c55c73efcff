"""CONNECT of an MQTT connection: authentication (users, tokens, JWTs, TLS maps, the auth callout), the
session bound or taken over, the CONNACK, the saved subscriptions restored, and keep-alive."""
from __future__ import annotations

import asyncio
import time
from typing import Any

from . import codec as C
from .common import (RC5, RC311_ID_REJECTED, RC311_NOT_AUTHORIZED, RC_BAD_AUTH_METHOD, RC_KEEPALIVE,
                     RC_NOT_AUTHORIZED, RC_QOS_NOT_SUPPORTED, RC_TOPIC_NAME_INVALID, SERVER_ALIAS_MAX, _HDRS)
from .store import AccountSessions, Session, client_hash, nuid
from .topics import TopicError, subject_to_topic, topic_to_subject
from rillet.server.operator import expiry_delay


class ConnectMixin:
    """The connect part of ``MqttConn`` (its state is the connection's, set up in ``MqttConn.__init__``)."""

    # ---- CONNECT -------------------------------------------------------------------------------------------

    async def on_connect(self, p: C.Connect) -> None:
        srv = self.server
        ms = self.ms
        self.version = p.version
        v5 = p.version >= 5
        if self.ka_handle is not None:
            self.ka_handle.cancel()
            self.ka_handle = None

        def refuse(rc311: int, reason: str, log: str) -> None:
            self.send_packet(C.ConnAck(False, RC5[rc311] if v5 else rc311,
                                       {"reason_string": reason} if v5 and self.problem_info else {}))
            srv.log.error(f"{self.log_prefix()} - {log}")
            self.close(reason)

        if v5:
            self.problem_info = p.props.get("request_problem_information", 1) == 1
            self.client_recv_max = p.props.get("receive_maximum", 65535)
            self.client_max_packet = p.props.get("maximum_packet_size", 0)
            self.client_alias_max = p.props.get("topic_alias_maximum", 0)
            self.session_expiry = p.props.get("session_expiry_interval", 0)
            if "authentication_method" in p.props:
                self.send_packet(C.ConnAck(False, RC_BAD_AUTH_METHOD,
                                           {"reason_string": "enhanced authentication is not supported"}))
                self.close("Authentication Failure")
                return
        cid = p.client_id
        if not cid:
            if not p.clean:
                self.client_id = ""
                refuse(RC311_ID_REJECTED, "Client ID rejected",
                       "when client ID is empty, clean session flag must be set to 1")
                return
            cid = nuid()
            self.assigned = cid  # type: ignore[attr-defined]
        if any(ch in cid for ch in " \t\r\n.*>"):
            self.client_id = cid
            refuse(RC311_ID_REJECTED, "Client ID rejected", f"invalid character in client ID {cid!r}")
            return
        self.client_id = cid
        if p.username:
            self.opts.user = p.username
        if p.password is not None:  # (nats-server: the password is also the token)
            self.opts.password = self.opts.auth_token = p.password.decode("utf-8", "surrogateescape")
        if p.will is not None:
            if ms.reject_qos2 and p.will.qos == 2:
                self.send_packet(C.ConnAck(False, RC_QOS_NOT_SUPPORTED if v5 else 0x10))  # (nats-server's code)
                self.close("Protocol Violation")
                return
            try:
                self.will_subject = topic_to_subject(p.will.topic)
            except TopicError as e:
                raise C.MalformedPacket(str(e), RC_TOPIC_NAME_INVALID) from None
        # authentication, as a NATS CONNECT with the MQTT user name and password (the password is also the token);
        # an auth callout (the server's, or an account JWT's) decides when it is configured to
        if not await self._authorize(p):
            if self.closed:
                return
            srv.sysacc.auth_error(self, "Authentication Failure")
            refuse(RC311_NOT_AUTHORIZED, "Not authorized", "authentication error"
                   + (f" - User \"{p.username}\"" if p.username else ""))
            return
        if self.closed:
            return
        self.apply_limits(False)
        # as nats-server (isClientAuthorized): the account's CONNECT event once the client is authenticated
        self.connect_received = True
        srv.sysacc.client_connected(self)
        self.will = p.will
        self.keepalive = p.keepalive
        self.connect_packet = p  # (a configuration reload signs the client in again)
        try:
            asm = await ms.sessions_for(self.account)
        except Exception as e:
            srv.log.error(f"{self.log_prefix()} - unable to connect: {e}")
            if v5:  # (3.1.1: closed without a CONNACK, as nats-server)
                self.send_packet(C.ConnAck(False, RC5[3]))
            self.close("Protocol Violation")
            return
        self.asm = asm
        if asm.jailed(cid):
            await asyncio.sleep(1.0)
            self.close("Duplicate Client ID")
            return
        for _ in range(20):
            if cid not in asm.locked:
                break
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError(f"other session with client ID {cid!r} is in the process of connecting")
        asm.locked.add(cid)
        try:
            sess_present = await self._bind_session(asm, cid, p)
        finally:
            asm.locked.discard(cid)
        if self.closed:
            return
        self.connected = True
        # the steady state's PUBLISH headers (MQTT 5: the client id in the properties header, nothing else)
        self.fast_hdrs = (_HDRS[0], _HDRS[1]) if not v5 else (
            self._nats_headers(C.Publish("", b"", 0), 0), self._nats_headers(C.Publish("", b"", 1), 1))
        self.fast = True
        # after CONNECT: packets up to what MQTT 5 clients are told (a PUBLISH of max_payload and its topic and
        # properties); the NATS message's size is what max_payload limits (checked per PUBLISH, as nats-server)
        self.decoder.max_packet = ms.max_packet()
        ms.cancel_will(self.account, cid)
        props: dict[str, Any] = {}
        if v5:
            props = {"receive_maximum": ms.receive_max, "topic_alias_maximum": SERVER_ALIAS_MAX,
                     "maximum_packet_size": self.ms.max_packet(), "retain_available": 1,
                     "wildcard_subscription_available": 1, "subscription_identifier_available": 1,
                     "shared_subscription_available": 1}
            if ms.reject_qos2:
                props["maximum_qos"] = 1
            if getattr(self, "assigned", None):
                props["assigned_client_identifier"] = cid
            if p.props.get("request_response_information") == 1:
                props["response_information"] = f"rsp/{client_hash(cid)}"
            mk = ms.max_keep_alive
            if mk and (self.keepalive == 0 or self.keepalive > mk):
                self.keepalive = mk  # (the client must use it, MQTT-3.2.2-21)
                props["server_keep_alive"] = mk
        self.send_packet(C.ConnAck(sess_present, 0, props))
        if self._subs_at_limit():
            return
        if self.keepalive:
            self._arm_keepalive()
        srv.log.debug(f"{self.log_prefix()} - Client connected")
        # the session's saved subscriptions, then the PUBRELs it is owed
        sess = self.sess
        assert sess is not None
        if sess.subs:
            for subject, qos in list(sess.subs.items()):
                f = sess.filters.get(subject) or {}
                o = C.SubOpts(qos, bool(f.get("nl")), bool(f.get("rap")), int(f.get("rh", 0)))
                await self._add_sub(subject, f.get("topic") or subject_to_topic(subject), o, int(f.get("sid", 0)),
                                    f.get("queue"), restoring=True)
        if sess.pubrel:
            await self._ensure_pubrel()
        if v5 and sess_present:
            # the deliveries and PUBRELs left unacknowledged by the session's last connection, redelivered now
            # by their consumers (a NAK) rather than after ack_wait: the same message comes back to the same
            # packet id (``_on_js_msg`` finds it in ``cpending``), with DUP set
            jsa = asm.jsa
            for ack, _dur, _sseq in list(sess.pending_pub.values()):
                if ack:
                    jsa.send(ack, b"-NAK")
            for ack in list(sess.pending_rel.values()):
                jsa.send(ack, b"-NAK")

    def apply_limits(self, user: bool = True) -> None:
        """nats-server's limits for a client (applyAccountLimits): the lowest of the user JWT's, the account's and
        the server's payload and subscription limits. ``user``: whether the user JWT's own count; nats-server
        applies the limits at CONNECT before it keeps an MQTT client's JWT (so only the account's and the
        server's hold then) and again, with the JWT, when an account JWT update comes (``Operator``'s refresh
        calls this; a connection then at or over its subscription limit is closed)."""
        def lowest(*vals: int) -> int:
            v = [x for x in vals if x is not None and x >= 0]
            return min(v) if v else -1
        u = self.jwt_user if user else None
        o = self.server.opts
        acc = self.account
        self.mpay = lowest(u.payload if u is not None else -1, getattr(acc, "mpay", -1), o.max_payload or -1)
        self.sub_limit = lowest(u.subs if u is not None else -1, getattr(acc, "msubs", -1), o.max_subscriptions or -1)
        if user:
            self._subs_at_limit()

    def _subs_at_limit(self) -> bool:
        """At (or over) the subscription limit: closed, as nats-server closes a client its limits leave there."""
        mx = self.sub_limit
        if mx < 0 or len(self.subs) < mx or self.closed:
            return False
        self.server.log.error(f"{self.log_prefix()} - maximum subscriptions exceeded")
        self.close("Maximum Subscriptions Exceeded", abnormal=True)
        return True

    async def _authorize(self, p: C.Connect) -> bool:
        """Authenticate, or have the auth callout decide (nats-server sends MQTT users to it as other clients:
        the config's ``authorization { auth_callout }`` unless the mqtt block has its own authorization, or
        the callout of the account the user JWT names)."""
        srv = self.server
        callout: list = []
        if not self._authenticate(p, callout):
            return False
        if not callout:
            return True
        ac, jwt_sub = callout
        loop = asyncio.get_running_loop()
        self._callout_wait = loop.create_future()
        ac.start(self, self.opts, jwt_sub=jwt_sub)
        user = await self._callout_wait
        self._callout_wait = None
        if user is None or self.closed:
            return False
        self.jwt_user = None
        if self.jwt_timer is not None:
            self.jwt_timer.cancel()
            self.jwt_timer = None
        self.perms = None
        self._apply_user(user)
        self.user = user.username or self.opts.user or user.nkey
        self.callout_user = user
        (getattr(user, "callout", None) or srv.auth_callout).apply_limits(self, user)
        return True

    def callout_started(self) -> None:
        """(AuthCallout.start) The CONNECT waits in ``_authorize`` for the answer; nothing else is read meanwhile:
        the packet task is busy with the CONNECT."""

    def callout_done(self, user: Any, reason: str) -> None:
        """(AuthCallout) The callout admitted the client as ``user``, or refused it (None). After a reload's
        recheck (no CONNECT waiting) a refusal closes the connection."""
        w = self._callout_wait
        if w is not None:
            if not w.done():
                w.set_result(user)
            return
        if user is None and not self.closed:
            self.server.sysacc.auth_error(self, "Authentication Failure")
            self.server.log.error(f"{self.log_prefix()} - authentication error after reload")
            if self.version >= 5:
                self.send_packet(C.Disconnect(RC_NOT_AUTHORIZED))
            self.close("Authentication Failure", abnormal=True)

    def update_slow_path(self) -> None:
        """(Called when permissions change) forget the publish permissions cached per topic."""
        self.pubs.clear()
        self.fpubs.clear()

    def prune_subscriptions(self) -> None:
        """Drop the subscriptions the connection's (new) permissions no longer allow."""
        self.update_slow_path()
        if self.perms is not None:
            for key, s in list(self.msubs.items()):
                if not self.perms.can_subscribe(s.subject, s.queue):
                    self._drop_sub(s)
                    del self.msubs[key]

    def _authenticate(self, p: C.Connect, callout: list | None = None) -> bool:
        srv = self.server
        auth = self.ms.authenticator()
        self.auth = auth
        connect: dict[str, Any] = {}
        if p.username is not None:
            connect["user"] = p.username
        if p.password is not None:
            pw = p.password.decode("utf-8", "surrogateescape")
            connect["pass"] = pw
            connect["auth_token"] = pw
        if srv.operator is not None and auth.operator_mode:
            # nats-server: the password field carries the user JWT (bearer: no nonce to sign)
            if p.password:
                connect["jwt"] = self.opts.jwt = p.password.decode("utf-8", "surrogateescape")
            res = srv.operator.authenticate(self, connect) or False
            oc = srv.operator.callout_for(res.account) if res is not False and callout is not None else None
            if oc is not None and oc.raw_user(self.opts, res.nkey) not in oc.cfg.auth_users:
                # the account's JWT delegates its users' admission to its auth callout service
                callout[:] = [oc, res.nkey]
                return True
        else:
            peer = None
            t = self.transport
            so = t.get_extra_info("ssl_object") if t is not None else None
            if so is not None:
                peer = so.getpeercert()
            mt = srv.opts.mqtt.get("tls")
            if mt is not None and mt.verify_and_map and auth.users and self.conn_type == "MQTT":
                # the client certificate names the user (as nats-server's tls_map for MQTT)
                from rillet.server.auth import tls_map_user
                u = tls_map_user(auth.users, peer or {}, self.conn_type)
                res = u if u is not None else False
            else:
                res = auth.authenticate(connect, None, self.conn_type, peer)
            ac = srv.auth_callout
            if callout is not None and ac is not None and srv.operator is None and ac.delegates(self, self.opts, res):
                callout[:] = [ac, ""]  # (an mqtt block with its own authorization is not delegated)
                return True
        if res is False:
            return False
        if res is not True and res is not None:
            self._apply_user(res)
            if getattr(res, "jwt", None):
                self.jwt_user = res
                delay = expiry_delay(res)
                if delay is not None:
                    # the user JWT expires: the connection goes then, as nats-server closes it
                    self.jwt_timer = asyncio.get_event_loop().call_later(delay, self._jwt_expired)
        elif p.username:
            self.user = p.username
        return True

    def recheck_auth(self) -> None:
        p = getattr(self, "connect_packet", None)
        if p is None:
            return
        cu = self.callout_user
        if cu is not None:
            # admitted by an auth callout: asked again (as nats-server after a reload); the answer applies
            # through AuthCallout._done
            ac = getattr(cu, "callout", None) or self.server.auth_callout
            if ac is not None:
                ac.recheck(self)
                return
        acc = self.account
        self.perms = None
        if not self._authenticate(p) or self.account is not acc:
            self.server.log.error(f"{self.log_prefix()} - authentication error after reload")
            if self.version >= 5:
                self.send_packet(C.Disconnect(RC_NOT_AUTHORIZED))
            self.close("Authentication Failure", abnormal=True)
            return
        self.prune_subscriptions()

    def _apply_user(self, u: Any) -> None:
        from rillet.server.auth import PermChecker
        self.user = getattr(u, "username", "") or getattr(u, "nkey", "")
        if getattr(u, "permissions", None) is not None:
            self.perms = PermChecker(u.permissions)
        name = getattr(u, "account", None)
        if name:
            acc = self.server.lookup_account(name)
            self.account.clients.discard(self)
            self.account = acc

    async def _bind_session(self, asm: AccountSessions, cid: str, p: C.Connect) -> bool:
        """Take over or restore the client id's session (discarding it for a clean one); True if one is
        present for the client."""
        v5 = p.version >= 5
        # MQTT 5: clean start discards, the expiry interval says whether it outlives the connection;
        # 3.1.1: clean session does both
        persistent = (self.session_expiry > 0) if v5 else not p.clean
        settling = asm.settling.get(cid)
        if settling is not None:
            await asyncio.wait([settling], timeout=asm.jsa.timeout)
        sess = asm.sessions.get(cid)
        created = False
        if sess is None:
            # a client id no session record is stored for (the common first connect): the record is written
            # at once, on the condition that there is none, one JetStream round trip instead of a read and a
            # write; if there is one, it is read as before
            fresh = Session(asm, cid)
            fresh.clean = not persistent
            fresh.version = p.version
            fresh.expiry = self.session_expiry if v5 else 0
            created = await fresh.create()
            if created:
                sess = fresh
        if created:
            exists = False
        elif sess is None:
            sess = await asm.load_session(cid)
            exists = getattr(sess, "exists", False)
            gone = getattr(sess, "gone", 0) or 0
            if exists and sess.expiry and sess.expiry != 0xFFFFFFFF and gone and time.time() - gone > sess.expiry:
                async with sess.lock:
                    await sess.clear(True)  # expired while no server held it (MQTT 5)
                exists = False
        else:
            exists = True
        present = False
        old = sess.conn
        if old is not None and old is not self:
            old.will = None
            asm.flappers[cid] = time.monotonic()
            self.server.log.warn(f"{self.log_prefix()} - Replacing old client {old.log_prefix()} since both have "
                                 f"the same client ID {cid!r}")
            old.takeover()
        async with sess.lock:
            if exists:
                discard = p.clean if v5 else (p.clean or sess.clean)
                if discard:
                    await sess.clear(v5)
                else:
                    present = True
            elif v5 and p.clean:
                # (no session, but QoS 2 messages stored as its last connection closed may be left: a clean
                # start has none, or a new PUBLISH reusing a packet id would be taken for a resend)
                await sess.purge_qos2_in()
            sess.conn = self
            sess.clean = not persistent
            sess.version = p.version
            sess.expiry = self.session_expiry if v5 else 0
            sess.gone = 0  # type: ignore[attr-defined]
            sess.rel_sub_made = False
            if present and v5:
                # MQTT 5: the unacknowledged QoS 1/2 deliveries are sent again at once with their packet ids
                # (MQTT-4.4.0-1, on_connect); retained messages sent with no consumer behind them are not
                for pi, (ack, dur, sseq) in list(sess.pending_pub.items()):
                    if not ack:
                        del sess.pending_pub[pi]
                        sess.cpending.pop((dur, sseq), None)
            else:
                # (3.1.1, as nats-server: they come again after ack_wait, with new packet ids)
                sess.pending_pub.clear()
                sess.cpending.clear()
            asm.sessions[cid] = sess
            self.sess = sess
            if not created:  # (a created record already says all this)
                await sess.save()
        return present

    # ---- keep-alive ------------------------------------------------------------------------------------------

    def _arm_keepalive(self) -> None:
        loop = asyncio.get_event_loop()
        # (3.1.1: nats-server's read deadline is the keep-alive times 1.5 in whole seconds, truncated: 1 s for a
        # keep-alive of 1, 4 s for 3; MQTT 5, which nats-server has not, takes the specification's 1.5 times)
        limit = self.keepalive * 1.5 if self.version >= 5 else int(self.keepalive * 1.5)
        wait = limit - (time.monotonic() - self.last_read)
        if wait <= 0:
            self.server.log.debug(f"{self.log_prefix()} - keep-alive timeout")
            if self.version >= 5:
                self.send_packet(C.Disconnect(RC_KEEPALIVE))
            self.close("Read Error", abnormal=True)
            return
        self.ka_handle = loop.call_later(wait, self._arm_keepalive)
