# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled twin of rillet.server.delivery.deliver_result, the delivery executor (see rillet.lane).

The pure function stays the reference: this one runs the same steps in the same order with the same calls
(the same ``random()`` draws, the same bytes into the same output buffers, the same counters, callbacks,
``_perm_ok``, ``forward``, ``no_responders``), and hands a message to the pure function whenever it is not
the plain case: a result with no plan yet (the pure one makes it), a traced message (``msgtrace`` current
with headers, or the server's ``trace`` on), an account with a gateway step, arguments of other types.

What makes it pay where compiling the Python loop did not: the objects it reads per subscriber keep their
fields in ``__slots__`` -- ``Subscription``, ``SublistResult``, ``Plan``, ``Account`` and the output state
of ``Client`` (``out``, ``flush_pending``, ``out_msgs``, ``out_bytes``, ``perms``, ``headers``) -- so they
are C structures of one known layout in both lanes, and this module reads and writes those fields at their
offsets (taken from the classes' member descriptors when it is loaded) after an exact type check, instead of
a generic attribute lookup. Objects of any other type (a ``ShadowSub``, an ``InternalClient``, a subclass that
redefines one of those names) go through ordinary attribute access.
"""
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.float cimport PyFloat_AsDouble
from libc.string cimport memchr, memcmp, memcpy

from rillet.server import delivery as _pure
from rillet.server import msgtrace as _mt

cdef extern from "Python.h":
    bint PyMethod_Check(object o)
    PyObject* PyMethod_GET_FUNCTION(object o)
    PyObject* PyMethod_GET_SELF(object o)
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    PyObject* PyDict_GetItemWithError(object d, object k) except? NULL
    Py_ssize_t PyUnicode_FindChar(object s, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end, int direction) except -2
    object PyUnicode_Substring(object s, Py_ssize_t start, Py_ssize_t end)
    int PyDict_Contains(object d, object k) except -1
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    int PyType_IsSubtype(PyTypeObject* a, PyTypeObject* b)
    int PyByteArray_CheckExact(object o)
    PyTypeObject* Py_TYPE(object o)
    object PyNumber_InPlaceAdd(object a, object b)

cdef extern from *:
    """
    /* a type's attribute-cache version tag: 0 when none is valid (PyType_Modified, i.e. any assignment to the
       type or a base, clears it) */
    static unsigned int rillet_type_tag(PyTypeObject* t) {
        return (t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? t->tp_version_tag : 0;
    }
    """
    unsigned int rillet_type_tag(PyTypeObject* t) noexcept


cdef struct TypeAttr:
    # what a class attribute was when the type's version tag was ``tag`` (a method a test or another module
    # may replace: looked up again whenever the type changed)
    unsigned int tag
    PyObject* value  # (a reference of its own)


cdef inline object _type_attr(type t, str name, TypeAttr* cache):
    cdef unsigned int tag = rillet_type_tag(<PyTypeObject*>t)
    if tag != 0 and tag == cache.tag:
        return <object>cache.value
    v = getattr(t, name)
    tag = rillet_type_tag(<PyTypeObject*>t)
    Py_XDECREF(cache.value)
    Py_INCREF(v)
    cache.value = <PyObject*>v
    cache.tag = tag
    return v


cdef TypeAttr _acc_deliver_attr
cdef TypeAttr _acc_inner_attr
cdef TypeAttr _route_send_attr
_acc_deliver_attr.tag = _acc_inner_attr.tag = _route_send_attr.tag = 0
_acc_deliver_attr.value = _acc_inner_attr.value = _route_send_attr.value = NULL


cdef object _member_descriptor = None


cdef Py_ssize_t _off(type t, str name) except -1:
    """The offset of ``t``'s slot ``name`` in its instances (a member descriptor of an object field)."""
    d = getattr(t, name)
    if type(d) is not _member_descriptor:
        raise TypeError(f"{t.__name__}.{name} is not a slot")
    return (<PyMemberDescrObject*>d).d_member.offset


cdef inline object _get(object o, Py_ssize_t off, str name):
    cdef PyObject* v = (<PyObject**>((<char*><PyObject*>o) + off))[0]
    if v is NULL:
        raise AttributeError(name)
    return <object>v


cdef inline void _set(object o, Py_ssize_t off, object v):
    cdef PyObject** p = <PyObject**>((<char*><PyObject*>o) + off)
    cdef PyObject* old = p[0]
    Py_INCREF(v)
    p[0] = <PyObject*>v
    Py_XDECREF(old)


# the types and their slots' offsets: taken on first use (this module is loaded by rillet.server.delivery,
# before rillet.server.accounts and rillet.server.client, which import that one, are complete)
cdef bint _ready = False
cdef PyTypeObject* _RESULT_T = NULL
cdef PyTypeObject* _PLAN_T = NULL
cdef PyTypeObject* _SUB_T = NULL
cdef PyTypeObject* _CLIENT_T = NULL
cdef PyTypeObject* _ACC_T = NULL
cdef object _Client = None
cdef Py_ssize_t R_PSUBS, R_QSUBS, R_PLAN, P_LOCAL, P_PSUBS, P_QSUBS, P_PLAN, P_GW, P_RQUEUES, P_TARGETS, P_LINKS
cdef Py_ssize_t S_CLIENT, S_SID, S_MAX, S_NM, S_ICB, A_PENDING, A_SERVER, A_NAME, A_GW
cdef Py_ssize_t C_OUT, C_FLUSH, C_MSGS, C_BYTES, C_PERMS, C_HEADERS, C_ECHO
cdef Py_ssize_t C_IN_MSGS, C_IN_BYTES, C_SLOW, C_ACCOUNT, A_MAPPINGS, A_MATCH, A_NO_MATCH, L_CACHE, L_HITS
cdef PyTypeObject* _SUBLIST_T = NULL
cdef PyTypeObject* _LEVEL_T = NULL
cdef Py_ssize_t L_MISSES, L_TAILS, LV_NODES
cdef object _sublist_match = None
cdef object _reference_pub = None
cdef object _reference_acc_deliver = None
cdef object _Account = None
cdef tuple _CLIENT_SLOTS = ("out", "flush_pending", "out_msgs", "out_bytes", "perms", "headers", "in_msgs",
                            "in_bytes", "slow_path", "account", "echo")
cdef list _keep = []  # (the types, referenced)


cdef int _setup() except -1:
    global _ready, _member_descriptor, _RESULT_T, _PLAN_T, _SUB_T, _CLIENT_T, _ACC_T, _Client
    global R_PSUBS, R_QSUBS, R_PLAN, P_LOCAL, P_PSUBS, P_QSUBS, P_PLAN, P_GW, P_RQUEUES, P_TARGETS, P_LINKS
    global S_CLIENT, S_SID, S_MAX, S_NM, S_ICB, A_PENDING, A_SERVER, A_NAME, A_GW
    global C_OUT, C_FLUSH, C_MSGS, C_BYTES, C_PERMS, C_HEADERS, C_ECHO
    global C_IN_MSGS, C_IN_BYTES, C_SLOW, C_ACCOUNT, A_MAPPINGS, A_MATCH, A_NO_MATCH, L_CACHE, L_HITS
    global _SUBLIST_T, _sublist_match, _reference_pub, _reference_acc_deliver, _Account
    global _LEVEL_T, L_MISSES, L_TAILS, LV_NODES
    from rillet.server import accounts as accounts_mod
    from rillet.server import client as client_mod
    from rillet.server.accounts import Account
    from rillet.server.client import Client, Subscription
    from rillet.subjects.sublist import Sublist, SublistResult, _Level
    Plan = _pure.Plan
    _member_descriptor = type(Subscription.client)
    R_PSUBS, R_QSUBS, R_PLAN = [_off(SublistResult, n) for n in ("psubs", "qsubs", "plan")]
    P_LOCAL, P_PSUBS, P_QSUBS, P_PLAN, P_GW, P_RQUEUES, P_TARGETS, P_LINKS = [
        _off(Plan, n) for n in ("local", "psubs", "qsubs", "plan", "gw", "rqueues", "targets", "links")]
    S_CLIENT, S_SID, S_MAX, S_NM, S_ICB = [_off(Subscription, n) for n in ("client", "sid_b", "max", "nm", "icb")]
    A_PENDING = _off(Account, "_pending")
    A_SERVER = _off(Account, "server")
    A_NAME = _off(Account, "name_b")
    A_GW = _off(Account, "gw")
    C_OUT, C_FLUSH, C_MSGS, C_BYTES, C_PERMS, C_HEADERS, C_ECHO, C_IN_MSGS, C_IN_BYTES, C_SLOW, C_ACCOUNT = [
        _off(Client, n) for n in ("out", "flush_pending", "out_msgs", "out_bytes", "perms", "headers", "echo",
                                  "in_msgs", "in_bytes", "slow_path", "account")]
    A_MAPPINGS = _off(Account, "mappings")
    A_MATCH = _off(Account, "_match")
    A_NO_MATCH = _off(Account, "no_match")
    L_CACHE = _off(Sublist, "_cache")
    L_HITS = _off(Sublist, "_hits")
    L_MISSES = _off(Sublist, "_misses")
    L_TAILS = _off(Sublist, "_tails")
    LV_NODES = _off(_Level, "nodes")
    _LEVEL_T = <PyTypeObject*>_Level
    _SUBLIST_T = <PyTypeObject*>Sublist
    _sublist_match = Sublist.match
    _reference_pub = client_mod.reference_proto_pub
    _reference_acc_deliver = accounts_mod.reference_deliver
    _Account = Account
    _keep.extend((SublistResult, Plan, Subscription, Client, Account, Sublist, _Level))
    _RESULT_T = <PyTypeObject*>SublistResult
    _PLAN_T = <PyTypeObject*>Plan
    _SUB_T = <PyTypeObject*>Subscription
    _CLIENT_T = <PyTypeObject*>Client
    _ACC_T = <PyTypeObject*>Account
    _Client = Client
    _ready = True
    return 0


cdef object _pure_deliver = _pure.reference_deliver_result
cdef object _perm_ok = _pure._perm_ok
cdef object _strip_headers = _pure._strip_headers
cdef object _out_overflow = _pure.out_overflow
cdef Py_ssize_t _OUT_CHECK = _pure.OUT_CHECK
cdef object _forward = _pure.forward
cdef object _no_responders_ref = _pure.reference_no_responders
cdef object _random = _pure.random
cdef object _RemoteSub = _pure.RemoteSub
cdef object _NONE = _pure._NONE
cdef object _LINKS = _pure.LINKS
cdef Py_ssize_t _LINKS_MAX = _pure.LINKS_MAX
cdef object _GATEWAY = _pure.GATEWAY

# subclasses of Client whose output state is Client's own slots (checked once per type)
cdef dict _client_types = {}


cdef bint _client_slots(PyTypeObject* t):
    if t == _CLIENT_T:
        return True
    ok = _client_types.get(<object>t)
    if ok is None:
        ok = PyType_IsSubtype(t, _CLIENT_T) != 0
        if ok:
            for name in _CLIENT_SLOTS:
                if getattr(<object>t, name) is not getattr(_Client, name):
                    ok = False
                    break
        _client_types[<object>t] = ok
    return ok


# ---- the fields, by slot when the type is the known one -------------------------------------------------------

cdef inline object _sub_get(object sub, bint known, Py_ssize_t off, str name):
    return _get(sub, off, name) if known else getattr(sub, name)


cdef inline void _sub_set(object sub, bint known, Py_ssize_t off, str name, object v) except *:
    if known:
        _set(sub, off, v)
    else:
        setattr(sub, name, v)


cdef inline int _append(object out, const char* a, Py_ssize_t na, const char* b, Py_ssize_t nb,
                         const char* d, Py_ssize_t nd) except -1:
    """Three pieces onto a bytearray (as three ``+=``)."""
    cdef Py_ssize_t k = PyByteArray_GET_SIZE(out)
    cdef char* w
    if PyByteArray_Resize(out, k + na + nb + nd) < 0:
        return -1
    w = PyByteArray_AS_STRING(out) + k
    memcpy(w, a, na)
    memcpy(w + na, b, nb)
    memcpy(w + na + nb, d, nd)
    return 0


cdef inline int _write(object sc, bint known, object sid, bytes head, bytes tail, object subject,
                       object reply, Py_ssize_t hdr, object hdr_o, object msg) except -1:
    """One message frame onto ``sc``'s output, as the pure executor writes it (and its OUT_CHECK)."""
    if known:
        out = _get(sc, C_OUT, "out")
        if hdr >= 0 and not _get(sc, C_HEADERS, "headers"):
            out += b"MSG %b %b%b" % (subject, sid, _strip_headers(reply, hdr_o, msg))
            if len(out) > _OUT_CHECK:
                _out_overflow(sc)
            return 0
    else:
        out = sc.out
        if hdr >= 0 and not sc.headers:
            out += b"MSG %b %b%b" % (subject, sid, _strip_headers(reply, hdr_o, msg))
            if len(out) > _OUT_CHECK:
                _out_overflow(sc)
            return 0
    if PyByteArray_CheckExact(out) and type(sid) is bytes:
        _append(out, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head), PyBytes_AS_STRING(sid),
                PyBytes_GET_SIZE(sid), PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail))
        if PyByteArray_GET_SIZE(out) > _OUT_CHECK:
            _out_overflow(sc)
    else:
        out = PyNumber_InPlaceAdd(out, head)
        out = PyNumber_InPlaceAdd(out, sid)
        out = PyNumber_InPlaceAdd(out, tail)
        if len(out) > _OUT_CHECK:
            _out_overflow(sc)
    return 0


cdef inline void _count(object sc, bint known, Py_ssize_t size, list pending) except *:
    if known:
        _set(sc, C_MSGS, _get(sc, C_MSGS, "out_msgs") + 1)
        _set(sc, C_BYTES, _get(sc, C_BYTES, "out_bytes") + size)
        if not _get(sc, C_FLUSH, "flush_pending"):
            _set(sc, C_FLUSH, True)
            pending.append(sc)
    else:
        sc.out_msgs += 1
        sc.out_bytes += size
        if not sc.flush_pending:
            sc.flush_pending = True
            pending.append(sc)


cdef bytes _frame_part(const char* a, Py_ssize_t na, const char* b, Py_ssize_t nb, const char* d,
                       Py_ssize_t nd, const char* e, Py_ssize_t ne, const char* f, Py_ssize_t nf):
    """The pieces, joined, as one bytes object."""
    cdef bytes o = PyBytes_FromStringAndSize(NULL, na + nb + nd + ne + nf)
    cdef char* w = PyBytes_AS_STRING(o)
    memcpy(w, a, na)
    w += na
    memcpy(w, b, nb)
    w += nb
    memcpy(w, d, nd)
    w += nd
    memcpy(w, e, ne)
    w += ne
    memcpy(w, f, nf)
    return o


cdef inline Py_ssize_t _digits(char* w, Py_ssize_t v) noexcept:
    """``v`` (>= 0) in decimal at w; its length."""
    cdef char tmp[24]
    cdef Py_ssize_t k = 0, i
    while True:
        tmp[k] = <char>(48 + v % 10)
        k += 1
        v //= 10
        if v == 0:
            break
    for i in range(k):
        w[i] = tmp[k - 1 - i]
    return k


cdef object _icb(object sub, bint known, object icb, object c, object subject, object reply, object hdr_o,
                 object msg, object route):
    """An internal subscription's callback, as the pure executor calls it (its count first)."""
    _sub_set(sub, known, S_NM, "nm", _sub_get(sub, known, S_NM, "nm") + 1)
    if route is not None and getattr(icb, "routed", False):
        return icb(sub, c, route, reply, hdr_o, msg, subject)
    return icb(sub, c, subject, reply, hdr_o, msg)


cdef object _pick(object group, object c, bint echo, object subject, object reply):
    """``delivery._pick``: one random member of a queue group that may receive this message."""
    cdef Py_ssize_t n = len(group)
    cdef Py_ssize_t i = <Py_ssize_t>(PyFloat_AsDouble(_random()) * n)
    cdef Py_ssize_t k
    cdef bint known
    for k in range(n):
        sub = group[(i + k) % n]
        known = Py_TYPE(sub) == _SUB_T
        sc = _sub_get(sub, known, S_CLIENT, "client")
        if sc is c and not echo:
            continue
        mx = _sub_get(sub, known, S_MAX, "max")
        if mx and _sub_get(sub, known, S_NM, "nm") >= mx:
            continue
        if _client_slots(Py_TYPE(sc)):
            perms = _get(sc, C_PERMS, "perms")
        else:
            perms = sc.perms
        if perms is not None and _sub_get(sub, known, S_ICB, "icb") is None and \
                not _perm_ok(sc, subject, reply):
            continue
        return sub
    return None


def deliver_result(acc, c, r, subject, reply, hdr, msg, route=None, rreply=None):
    """``rillet.server.delivery.deliver_result`` (the reference; see there), compiled for the plain case."""
    if not _ready:
        _setup()
    return _deliver(acc, c, r, subject, reply, hdr, msg, route, rreply)


cdef object _deliver(acc, c, r, subject, reply, hdr, msg, route, rreply):
    if type(subject) is not bytes or type(msg) is not bytes or (reply is not None and type(reply) is not bytes) \
            or type(hdr) is not int or Py_TYPE(acc) != _ACC_T:
        return _pure_deliver(acc, c, r, subject, reply, hdr, msg, route, rreply)
    cdef PyTypeObject* rt = Py_TYPE(r)
    if rt == _RESULT_T:
        plan = _get(r, R_PLAN, "plan")
    elif rt == _PLAN_T:
        plan = _get(r, P_PLAN, "plan")
    else:
        plan = r.plan
    cdef Py_ssize_t h = hdr
    cdef Py_ssize_t np
    if plan is None and rt == _RESULT_T:
        # the plan of a new result (a new reply subject, an ack subject: one per message), made as the reference
        # makes it (the shared ``LINKS`` for a few links' plain interest only)
        psubs = _get(r, R_PSUBS, "psubs")
        qs = _get(r, R_QSUBS, "qsubs")
        gw = _get(acc, A_GW, "gw")
        np = len(psubs)
        if 0 < np <= _LINKS_MAX and type(psubs[0]) is _RemoteSub and gw is None and not qs:
            plan = _LINKS
            for sub in psubs:
                if type(sub) is not _RemoteSub:
                    plan = _Plan(r)
                    break
        else:
            plan = _Plan(r, gw)
        if psubs or qs:  # (the empty result is one object, shared by every sublist: it keeps no plan)
            _set(r, R_PLAN, plan)
    if plan is None or Py_TYPE(plan) != _PLAN_T or (h > 0 and _mt.CURRENT is not None) or \
            _get(plan, P_GW, "gw") is not None:
        return _pure_deliver(acc, c, r, subject, reply, hdr, msg, route, rreply)
    if _get(acc, A_SERVER, "server").trace_on:
        return _pure_deliver(acc, c, r, subject, reply, hdr, msg, route, rreply)
    return _execute(acc, c, r, rt, plan, _get(plan, P_LOCAL, "local"), _get(plan, P_PSUBS, "psubs"),
                    _get(plan, P_QSUBS, "qsubs"), subject, reply, h, hdr, msg, route, rreply)


cdef object _execute(acc, c, r, PyTypeObject* rt, plan, bint local, psubs, qsubs, subject, reply, Py_ssize_t h,
                     hdr, msg, route, rreply):
    """The executor's steps after its checks (``plan``: the plan's fields given; for a local one, ``r``, ``rt``
    and ``plan`` are not read)."""
    qsubs0 = qsubs
    targets = None
    cdef double x
    cdef Py_ssize_t lo, hi, mid, nm
    if not local:
        # one frame per link: plain interest, plus the queue groups that link serves
        rqueues = _get(plan, P_RQUEUES, "rqueues")
        if not rqueues:
            targets = _get(plan, P_TARGETS, "targets")
            if targets is None:  # ``LINKS``: the result's links
                targets = {}
                for sub in (_get(r, R_PSUBS, "psubs") if rt == _RESULT_T else r.psubs):
                    targets[sub.client] = _NONE
        else:
            links = _get(plan, P_LINKS, "links")
            targets = {rc: [] for rc in links} if links else {}
            for qname, members, cum, loc in rqueues:
                # bisect_right(cum, random() * cum[-1]), at most the last member
                x = PyFloat_AsDouble(_random()) * <double>cum[len(cum) - 1]
                nm = len(members)
                lo = 0
                hi = len(cum)
                while lo < hi:
                    mid = (lo + hi) // 2
                    if x < <double>cum[mid]:
                        hi = mid
                    else:
                        lo = mid + 1
                m = members[lo if lo < nm - 1 else nm - 1]
                if type(m) is _RemoteSub:
                    q = targets.get(m.client)
                    if q is None:
                        targets[m.client] = [qname]
                    else:
                        q.append(qname)
                else:  # a local member: one of the group's local members takes it
                    if qsubs is qsubs0:
                        qsubs = list(qsubs)
                    qsubs.append(loc)
    cdef Py_ssize_t size = len(msg)
    cdef Py_ssize_t ns = PyBytes_GET_SIZE(subject)
    cdef Py_ssize_t nr = PyBytes_GET_SIZE(reply) if reply is not None else 0
    cdef char num[48]
    cdef Py_ssize_t k = 0
    head = tail = None
    if psubs or qsubs:  # (a message for links only needs no MSG frame)
        # head b"MSG <subject> " / b"HMSG <subject> ", tail b" [<reply> ][<hdr> ]<size>\r\n<msg>\r\n"
        num[0] = 32
        k = 1
        if h >= 0:
            k += _digits(num + k, h)
            num[k] = 32
            k += 1
        k += _digits(num + k, size)
        num[k] = 13
        num[k + 1] = 10
        k += 2
        if h < 0:
            head = _frame_part("MSG ", 4, PyBytes_AS_STRING(subject), ns, " ", 1, NULL, 0, NULL, 0)
        else:
            head = _frame_part("HMSG ", 5, PyBytes_AS_STRING(subject), ns, " ", 1, NULL, 0, NULL, 0)
        if nr:
            tail = _frame_part(" ", 1, PyBytes_AS_STRING(reply), nr, num, k, PyBytes_AS_STRING(msg), size, "\r\n", 2)
        else:
            tail = _frame_part(num, k, PyBytes_AS_STRING(msg), size, "\r\n", 2, NULL, 0, NULL, 0)
    cdef list pending = _get(acc, A_PENDING, "_pending")
    cdef bint no_echo = not (_get(c, C_ECHO, "echo") if _client_slots(Py_TYPE(c)) else c.echo)
    cdef Py_ssize_t n = 0
    cdef bint known, sk
    done = None
    for sub in psubs:
        known = Py_TYPE(sub) == _SUB_T
        sc = _sub_get(sub, known, S_CLIENT, "client")
        if no_echo and sc is c:
            continue
        icb = _sub_get(sub, known, S_ICB, "icb")
        if icb is not None:
            if _icb(sub, known, icb, c, subject, reply, hdr, msg, route) is not False:
                n += 1
            continue
        sk = _client_slots(Py_TYPE(sc))
        if (_get(sc, C_PERMS, "perms") if sk else sc.perms) is not None and not _perm_ok(sc, subject, reply):
            continue
        cnt = _sub_get(sub, known, S_NM, "nm") + 1
        _sub_set(sub, known, S_NM, "nm", cnt)
        mx = _sub_get(sub, known, S_MAX, "max")
        if mx:
            if cnt > mx:
                continue
            if cnt == mx:
                if done is None:
                    done = []
                done.append(sub)
        _write(sc, sk, _sub_get(sub, known, S_SID, "sid_b"), head, tail, subject, reply, h, hdr, msg)
        _count(sc, sk, size, pending)
        n += 1
    if qsubs:
        for group in qsubs:
            sub = _pick(group, c, not no_echo, subject, reply)
            if sub is None:
                continue
            known = Py_TYPE(sub) == _SUB_T
            sc = _sub_get(sub, known, S_CLIENT, "client")
            icb = _sub_get(sub, known, S_ICB, "icb")
            if icb is not None:
                if _icb(sub, known, icb, c, subject, reply, hdr, msg, route) is not False:
                    n += 1
                continue
            cnt = _sub_get(sub, known, S_NM, "nm") + 1
            _sub_set(sub, known, S_NM, "nm", cnt)
            mx = _sub_get(sub, known, S_MAX, "max")
            if mx and cnt >= mx:
                if done is None:
                    done = []
                done.append(sub)
            sk = _client_slots(Py_TYPE(sc))
            _write(sc, sk, _sub_get(sub, known, S_SID, "sid_b"), head, tail, subject, reply, h, hdr, msg)
            _count(sc, sk, size, pending)
            n += 1
    if done is not None:
        for sub in done:
            sub.client.remove_sub(sub)
    if targets:  # (not a local plan, and links to send to)
        sent = _cforward(acc, c, targets, subject, reply, hdr, msg, route, rreply)
        return n > 0 or sent
    if n:
        return True
    # (a result with links only, or with nothing here, never answers 503 from here)
    if reply and c.no_responders and (local or psubs or qsubs):
        no_responders(acc, c, subject, reply)
    return False


# ---- no responders ---------------------------------------------------------------------------------------------

cdef object _reply_form = _pure._reply_form
cdef object _tokens_match_literal = _pure.tokens_match_literal
cdef Py_ssize_t _REPLY_SUBS_SCAN = _pure.REPLY_SUBS_SCAN
cdef object _CLIENT_KIND = _pure.CLIENT
cdef object _NOT_HERE = object()  # (_reply_sub: a subscription subject this twin does not take: the reference's)
# a subscription's subject as _reply_sub tests it: (how, the form's text, the subject), both as the bytes a
# reply subject is (surrogateescape; see _pure._reply_form for ``how``)
cdef dict _FORMS = {}


cdef tuple _form(object subj):
    if type(subj) is not str:
        return None
    how, text = _reply_form(subj)
    try:
        form = (how, text.encode("utf-8", "surrogateescape"), subj.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return None
    if len(_FORMS) >= 4096:
        _FORMS.clear()
    _FORMS[subj] = form
    return form


cdef object _reply_sub(object acc, object c, bytes reply):
    """``_pure._reply_sub`` on the reply's bytes: every test of the reference is one on the same bytes (its
    prefixes end with a '.', which no UTF-8 sequence holds, so a prefix of the text is one of the bytes), the
    token by token match (a wildcard before the last token) and the sublist's on the decoded text as there.
    ``_NOT_HERE`` when a subscription's subject is not text (the reference decides)."""
    subs = getattr(c, "subs", None)
    cdef Py_ssize_t nr, nt, how
    cdef const char* r
    cdef bytes tb, sb
    if c.kind == _CLIENT_KIND and type(subs) is dict and len(<dict>subs) <= _REPLY_SUBS_SCAN:
        nr = PyBytes_GET_SIZE(reply)
        r = PyBytes_AS_STRING(reply)
        if nr == 0 or r[0] == 46 or r[nr - 1] == 46 or b".." in reply:
            return None  # (an empty token: matches nothing, as in the sublist)
        toks = None
        for sub in (<dict>subs).values():
            if sub.queue:
                continue
            subj = sub.subject
            form = _FORMS.get(subj)
            if form is None:
                form = _form(subj)
                if form is None:
                    return _NOT_HERE
            how = (<tuple>form)[0]
            tb = (<tuple>form)[1]
            sb = (<tuple>form)[2]
            if PyBytes_GET_SIZE(sb) == nr and memcmp(PyBytes_AS_STRING(sb), r, nr) == 0:
                return sub
            nt = PyBytes_GET_SIZE(tb)
            if how == 1:
                if nt <= nr and memcmp(PyBytes_AS_STRING(tb), r, nt) == 0 and memchr(r + nt, 46, nr - nt) == NULL:
                    return sub
            elif how == 2:
                if nt <= nr and memcmp(PyBytes_AS_STRING(tb), r, nt) == 0:
                    return sub
            elif how == 3:
                if toks is None:
                    toks = reply.decode("utf-8", "surrogateescape").split(".")
                if _tokens_match_literal(toks, subj.split(".")):
                    return sub
        return None
    for sub in acc._match(reply.decode("utf-8", "surrogateescape")).psubs:
        if sub.client is c:
            return sub
    return None


cdef int _frame_503(object out, bytes reply, bytes sid, bytes subject, Py_ssize_t n) except -1:
    """``HMSG <reply> <sid> <n> <n>\\r\\nNATS/1.0 503\\r\\nNats-Subject: <subject>\\r\\n\\r\\n\\r\\n`` onto ``out``."""
    cdef bytes ns = b"%d" % n
    cdef Py_ssize_t nn = PyBytes_GET_SIZE(ns), nr = PyBytes_GET_SIZE(reply), nd = PyBytes_GET_SIZE(sid)
    cdef Py_ssize_t nsub = PyBytes_GET_SIZE(subject)
    cdef Py_ssize_t k = PyByteArray_GET_SIZE(out)
    cdef Py_ssize_t size = 5 + nr + 1 + nd + 1 + nn + 1 + nn + 2 + 28 + nsub + 4 + 2
    cdef char* w
    if PyByteArray_Resize(out, k + size) < 0:
        return -1
    w = PyByteArray_AS_STRING(out) + k
    memcpy(w, b"HMSG ", 5)
    w += 5
    memcpy(w, PyBytes_AS_STRING(reply), nr)
    w += nr
    w[0] = 32
    w += 1
    memcpy(w, PyBytes_AS_STRING(sid), nd)
    w += nd
    w[0] = 32
    w += 1
    memcpy(w, PyBytes_AS_STRING(ns), nn)
    w += nn
    w[0] = 32
    w += 1
    memcpy(w, PyBytes_AS_STRING(ns), nn)
    w += nn
    memcpy(w, b"\r\nNATS/1.0 503\r\nNats-Subject: ", 30)
    w += 30
    memcpy(w, PyBytes_AS_STRING(subject), nsub)
    w += nsub
    memcpy(w, b"\r\n\r\n\r\n", 6)
    return 0


def reply_sub(acc, c, reply):
    """``_reply_sub`` as a function (tests compare it with ``rillet.server.delivery._reply_sub``)."""
    if type(reply) is not bytes:
        return _pure._reply_sub(acc, c, reply)
    sub = _reply_sub(acc, c, reply)
    return _pure._reply_sub(acc, c, reply) if sub is _NOT_HERE else sub


def no_responders(acc, c, subject, reply):
    """``rillet.server.delivery.no_responders`` (the reference: ``reference_no_responders``), compiled: the
    requester's reply subscription found on the reply's bytes (``_reply_sub``), the same 503 frame written."""
    if type(subject) is not bytes or type(reply) is not bytes:
        return _no_responders_ref(acc, c, subject, reply)
    sub = _reply_sub(acc, c, reply)
    if sub is None:
        return
    if sub is _NOT_HERE:
        return _no_responders_ref(acc, c, subject, reply)
    icb = sub.icb
    cdef Py_ssize_t n = 32 + PyBytes_GET_SIZE(subject)  # (the status header's size, as ``hdr`` below)
    if icb is None:
        if not _ready:
            _setup()
        sid = sub.sid_b
        if _client_slots(Py_TYPE(c)) and type(sid) is bytes:
            out = _get(c, C_OUT, "out")
            if PyByteArray_CheckExact(out):
                _frame_503(out, <bytes>reply, <bytes>sid, <bytes>subject, n)
                c.noresp_sent += 1
                if not _get(c, C_FLUSH, "flush_pending"):  # (Client.flush, as the executor does it)
                    _set(c, C_FLUSH, True)
                    c.server.pending_flush.append(c)
                return
    hdr = b"NATS/1.0 503\r\nNats-Subject: " + <bytes>subject + b"\r\n\r\n"
    if icb is not None:
        icb(sub, c, reply, None, PyBytes_GET_SIZE(hdr), hdr)
        return
    c.out += b"HMSG %b %b %d %d\r\n%b\r\n" % (reply, sub.sid_b, n, n, hdr)
    c.noresp_sent += 1  # (a burst of these paces the client's next read: rillet.server.client NORESP_BURST)
    c.flush()


# ---- a client's PUB ---------------------------------------------------------------------------------------------

def proto_pub(self, subject, reply, payload):
    """``Client.proto_pub`` (the reference: rillet.server.client.reference_proto_pub), compiled for the plain
    case -- a client without per-PUB checks (``slow_path``) in an account without mappings -- which the
    reference itself inlines: one match (the account's sublist cache, as ``Sublist.match``), then the executor,
    or the account's ``no_match``, or a 503. Anything else goes to the reference, before anything is counted."""
    if not _ready:
        _setup()
    if not _client_slots(Py_TYPE(self)) or type(subject) is not bytes or type(payload) is not bytes:
        return _reference_pub(self, subject, reply, payload)
    if _get(self, C_SLOW, "slow_path"):
        return _reference_pub(self, subject, reply, payload)
    acc = _get(self, C_ACCOUNT, "account")
    if Py_TYPE(acc) != _ACC_T or _get(acc, A_MAPPINGS, "mappings"):
        return _reference_pub(self, subject, reply, payload)
    _set(self, C_IN_MSGS, _get(self, C_IN_MSGS, "in_msgs") + 1)
    _set(self, C_IN_BYTES, _get(self, C_IN_BYTES, "in_bytes") + PyBytes_GET_SIZE(payload))
    r = _match(acc, subject)
    if _found(r):
        _run(acc, self, r, subject, reply, -1, payload, None)
    else:
        nm = _get(acc, A_NO_MATCH, "no_match")
        if nm is not None:  # (gateways: no subscriber here may still be one elsewhere)
            nm(self, subject, reply, -1, payload)
        elif reply and self.no_responders:
            acc._no_responders(self, subject, reply)


# ---- Account.deliver ----------------------------------------------------------------------------------------------

def account_deliver(self, c, subject, reply, hdr, msg, deliver=None):
    """``Account.deliver`` (the reference: rillet.server.accounts.reference_deliver) for an account of that class
    itself without mappings or a gateway step and bytes arguments (a JetStream reply, a client's HPUB): one match
    (``_match``), the executor or a 503. Anything else goes to the reference, before anything is done."""
    if not _ready:
        _setup()
    if Py_TYPE(self) != _ACC_T or type(subject) is not bytes or type(msg) is not bytes or type(hdr) is not int \
            or (reply is not None and type(reply) is not bytes) or (deliver is not None and type(deliver) is not bytes) \
            or _get(self, A_MAPPINGS, "mappings") or _get(self, A_GW, "gw") is not None:
        return _reference_acc_deliver(self, c, subject, reply, hdr, msg, deliver)
    r = _match(self, subject)
    if _found(r):
        if deliver is not None:
            return _run(self, c, r, deliver, reply, hdr, msg, subject)
        return _run(self, c, r, subject, reply, hdr, msg, None)
    if reply and c.no_responders:
        self._no_responders(c, subject, reply)
    return False


cdef object _found(r):
    """``r.psubs or r.qsubs`` (a sublist result)."""
    if Py_TYPE(r) == _RESULT_T:
        return _get(r, R_PSUBS, "psubs") or _get(r, R_QSUBS, "qsubs")
    return r.psubs or r.qsubs


cdef object _run(acc, c, r, subject, reply, hdr, msg, route):
    """``acc.deliver_result(c, r, subject, reply, hdr, msg[, route])``: this executor while it is the class's."""
    ex = _type_attr(_Account, "deliver_result", &_acc_deliver_attr)
    if ex is deliver_result:
        return _deliver(acc, c, r, subject, reply, hdr, msg, route, None)
    if route is None:
        return ex(acc, c, r, subject, reply, hdr, msg)
    return ex(acc, c, r, subject, reply, hdr, msg, route)


# ---- a message from a route ----------------------------------------------------------------------------------------

cdef object _reference_inbound = _pure.reference_deliver_inbound
cdef object _Plan = _pure.Plan
cdef object _Local = _pure.Local


def deliver_inbound(acc, rc, subject, reply, queues, hdr, msg):
    """``rillet.server.delivery.deliver_inbound`` (the reference: ``reference_deliver_inbound``), compiled: the
    match as ``Sublist.match``, the plan's inbound part, the executor. A JetStream delivery's reply
    (``$JS.ACK.``... with an ``@``) and other argument types go to the reference."""
    if not _ready:
        _setup()
    _inbound(acc, rc, subject, reply, queues, hdr, msg)


cdef object _match(acc, subject):
    """``acc._match(subject.decode("utf-8", "surrogateescape"))``, Sublist.match's cache hit inlined."""
    s = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(subject), PyBytes_GET_SIZE(subject), "surrogateescape")
    m = _get(acc, A_MATCH, "_match")
    cdef PyObject* hit
    if PyMethod_Check(m) and PyMethod_GET_FUNCTION(m) == <PyObject*>_sublist_match and \
            Py_TYPE(<object>PyMethod_GET_SELF(m)) == _SUBLIST_T:
        sl = <object>PyMethod_GET_SELF(m)
        cache = _get(sl, L_CACHE, "_cache")
        hit = PyDict_GetItemWithError(cache, s) if type(cache) is dict else NULL
        if hit is NULL:
            return _miss(sl, s)  # (Sublist.match on a miss)
        _set(sl, L_HITS, _get(sl, L_HITS, "_hits") + 1)
        return <object>hit
    return m(s)


cdef object _miss(sl, str s):
    """``sl._match_miss(s)`` with its first step here: the result the sublist keeps for ``s``'s prefix (``_tails``)
    when its last token names no literal node in the kept levels (a miss counted); else ``_match_miss`` itself."""
    tails = _get(sl, L_TAILS, "_tails")
    cdef Py_ssize_t n = len(s), k = PyUnicode_FindChar(s, 46, 0, len(s), -1)  # s.rfind(".")
    cdef PyObject* hit = NULL
    if type(tails) is dict and <dict>tails and 0 < k < n - 1:
        hit = PyDict_GetItemWithError(tails, PyUnicode_Substring(s, 0, k))
    tail = <object>hit if hit is not NULL else None
    if type(tail) is tuple and len(<tuple>tail) == 2 and type((<tuple>tail)[1]) is tuple:
        t = PyUnicode_Substring(s, k + 1, n)
        for level in <tuple>(<tuple>tail)[1]:
            if Py_TYPE(level) != _LEVEL_T or type(_get(level, LV_NODES, "nodes")) is not dict or \
                    PyDict_Contains(_get(level, LV_NODES, "nodes"), t):
                break
        else:
            _set(sl, L_MISSES, _get(sl, L_MISSES, "_misses") + 1)
            return (<tuple>tail)[0]
    return sl._match_miss(s)


cdef object _inbound(acc, rc, subject, reply, queues, hdr, msg):
    if Py_TYPE(acc) != _ACC_T or type(subject) is not bytes or \
            (reply is not None and (type(reply) is not bytes or
                                    (reply[:8] == b"$JS.ACK." and b"@" in reply))):
        return _reference_inbound(acc, rc, subject, reply, queues, hdr, msg)
    r = _match(acc, subject)
    if not _found(r):
        return None
    plan = _get(r, R_PLAN, "plan") if Py_TYPE(r) == _RESULT_T else r.plan
    if plan is None:
        plan = _Plan(r, acc.gw)
        r.plan = plan
    if queues:
        in_q = plan.in_q
        groups = []
        for q in queues:
            g = in_q.get(q if type(q) is bytes else bytes(q))
            if g is not None:
                groups.append(g)
        if groups:
            # the reference's ``Local(plan.in_psubs, groups)``, run without making it (a plan per message that
            # refers to itself, left for the GC) when the executor would take it itself
            if type(subject) is bytes and type(msg) is bytes and type(hdr) is int and \
                    not (<Py_ssize_t>hdr > 0 and _mt.CURRENT is not None) and \
                    not _get(acc, A_SERVER, "server").trace_on:
                in_psubs = plan.in_psubs
                _execute(acc, rc, None, NULL, None, True, in_psubs, groups, subject, reply, hdr, hdr, msg,
                         None, None)
                return None
            lr = _Local(plan.in_psubs, groups)
        else:
            lr = plan.inbound
    else:
        lr = plan.inbound
    if lr is None:
        lr = r  # (local plain subscribers only: the result is its own inbound part)
    if lr.psubs or lr.qsubs:
        _deliver(acc, rc, lr, subject, reply, hdr, msg, None, None)
    return None


# ---- routes: RMSG in, RMSG out -----------------------------------------------------------------------------------

cdef bint _route_ready = False
cdef PyTypeObject* _ROUTE_T = NULL
cdef Py_ssize_t RC_OUT, RC_FLUSH, RC_OUT_MSGS, RC_OUT_BYTES, RC_PINNED, RC_HEADERS, RC_IN_MSGS, RC_IN_BYTES
cdef Py_ssize_t RC_ACCOUNTS, RC_CLUSTER, RC_CLOSED
cdef object _RouteConnT = None
cdef object _accounts_mod = None
cdef object _reference_send = None
cdef object _reference_rmsg = None
cdef object _rmsg_head = None
cdef object _hmsg_head = None
cdef object _acc_deliver_routed = None
cdef object _acc_inner_routed = None


cdef int _route_setup() except -1:
    global _route_ready, _ROUTE_T, RC_OUT, RC_FLUSH, RC_OUT_MSGS, RC_OUT_BYTES, RC_PINNED, RC_HEADERS
    global RC_IN_MSGS, RC_IN_BYTES, RC_ACCOUNTS, RC_CLUSTER, _reference_send, _reference_rmsg, _rmsg_head
    global _hmsg_head, _acc_deliver_routed, _acc_inner_routed, RC_CLOSED, _RouteConnT, _accounts_mod
    if not _ready:
        _setup()
    from rillet.cluster import route
    RouteConn = route.RouteConn
    RC_OUT = _off(RouteConn, "out")
    RC_FLUSH = _off(RouteConn, "flush_pending")
    RC_OUT_MSGS = _off(RouteConn, "out_msgs")
    RC_OUT_BYTES = _off(RouteConn, "out_bytes")
    RC_PINNED = _off(RouteConn, "pinned_acc")
    RC_HEADERS = _off(RouteConn, "headers")
    RC_IN_MSGS = _off(RouteConn, "in_msgs")
    RC_IN_BYTES = _off(RouteConn, "in_bytes")
    RC_ACCOUNTS = _off(RouteConn, "_accounts")
    RC_CLUSTER = _off(RouteConn, "cluster")
    RC_CLOSED = _off(RouteConn, "closed")
    _RouteConnT = RouteConn
    from rillet.server import accounts
    _accounts_mod = accounts
    _reference_send = route.reference_send_msg
    _reference_rmsg = route.reference_proto_rmsg
    _rmsg_head = route._wire.rmsg_head
    _hmsg_head = route._wire.hmsg_head
    _acc_deliver_routed = _Account.__dict__["deliver_routed"]
    _acc_inner_routed = _Account.__dict__["_deliver_routed"]
    _keep.append(RouteConn)
    _ROUTE_T = <PyTypeObject*>RouteConn
    _route_ready = True
    return 0


def route_send_msg(self, account, subject, reply, queues, hdr, msg):
    """``RouteConn.send_msg`` (the reference: rillet.cluster.route.reference_send_msg), compiled: the frame's
    head from the lane's builders, head, body and CRLF appended at once."""
    if not _route_ready:
        _route_setup()
    _route_send(self, account, subject, reply, queues, hdr, msg)


cdef object _route_send(self, account, subject, reply, queues, hdr, msg):
    if Py_TYPE(self) != _ROUTE_T or type(msg) is not bytes or type(hdr) is not int:
        return _reference_send(self, account, subject, reply, queues, hdr, msg)
    out = _get(self, RC_OUT, "out")
    if _get(self, RC_PINNED, "pinned_acc"):
        account = None  # (a pinned route's account is not on the wire)
    cdef Py_ssize_t h = hdr
    if h < 0:
        head = _rmsg_head(account, subject, reply, queues, PyBytes_GET_SIZE(msg))
        body = msg
    elif _get(self, RC_HEADERS, "headers"):
        head = _hmsg_head(account, subject, reply, queues, hdr, PyBytes_GET_SIZE(msg))
        body = msg
    else:  # a peer without headers gets the payload only
        body = msg[h:]
        head = _rmsg_head(account, subject, reply, queues, PyBytes_GET_SIZE(body))
    if PyByteArray_CheckExact(out) and type(head) is bytes:
        _append(out, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head), PyBytes_AS_STRING(body),
                PyBytes_GET_SIZE(body), "\r\n", 2)
    else:
        out += head
        out += body
        out += b"\r\n"
    _set(self, RC_OUT_MSGS, _get(self, RC_OUT_MSGS, "out_msgs") + 1)
    _set(self, RC_OUT_BYTES, _get(self, RC_OUT_BYTES, "out_bytes") + PyBytes_GET_SIZE(msg))
    if not _get(self, RC_FLUSH, "flush_pending"):
        _set(self, RC_FLUSH, True)
        self.server.pending_flush.append(self)
    return None


def route_proto_rmsg(self, account, subject, reply, queues, payload):
    """``RouteConn.proto_rmsg`` (the reference: rillet.cluster.route.reference_proto_rmsg), compiled: the
    counts, the account (the connection's cache), then the cluster's entry for routed messages -- when it is
    ``Account.deliver_routed`` as it is (a server without gateways and leaf nodes), straight to the compiled
    ``deliver_inbound`` (an RMSG has no headers, so no trace to look for)."""
    if not _route_ready:
        _route_setup()
    if Py_TYPE(self) != _ROUTE_T or type(payload) is not bytes or type(account) is not bytes:
        return _reference_rmsg(self, account, subject, reply, queues, payload)
    _set(self, RC_IN_MSGS, _get(self, RC_IN_MSGS, "in_msgs") + 1)
    _set(self, RC_IN_BYTES, _get(self, RC_IN_BYTES, "in_bytes") + PyBytes_GET_SIZE(payload))
    accounts = _get(self, RC_ACCOUNTS, "_accounts")
    acc = accounts.get(account)
    if acc is None:
        acc = self._account(account)
        if acc is None:
            return None
    entry = _get(self, RC_CLUSTER, "cluster").routed_entry
    if entry is _acc_deliver_routed and _type_attr(_Account, "_deliver_routed", &_acc_inner_attr) is _acc_inner_routed and \
            _accounts_mod.deliver_inbound is deliver_inbound:
        _inbound(acc, self, subject, reply, queues, -1, payload)
    else:
        entry(acc, self, subject, reply, queues, -1, payload)
    return None


cdef object _cforward(acc, c, targets, subject, reply, hdr, msg, route, rreply):
    """``delivery.forward`` (the reference) for a message with no trace: a route's frame written here when the
    link is a ``RouteConn`` whose ``send_msg`` is the compiled one; a shown subject (``route``) and a message
    from a gateway go to the reference."""
    if route is not None or c.kind == _GATEWAY or type(targets) is not dict:
        return _forward(acc, c, targets, subject, reply, hdr, msg, route, rreply, None)
    name = _get(acc, A_NAME, "name_b")
    rep = reply if rreply is None else rreply
    cdef bint delivered = False
    cdef bint fast = _route_ready and _type_attr(_RouteConnT, "send_msg", &_route_send_attr) is route_send_msg
    for rc, queues in (<dict>targets).items():
        if fast and Py_TYPE(rc) == _ROUTE_T:
            if not _get(rc, RC_CLOSED, "closed"):
                _route_send(rc, name, subject, rep, queues, hdr, msg)
                delivered = True
        elif not rc.closed:
            rc.send_msg(name, subject, rep, queues, hdr, msg)
            delivered = True
    return delivered
