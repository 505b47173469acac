"""attnserve.Client: the blocking client (attnserve.AsyncClient is its asyncio twin)."""

import contextlib
import itertools
import queue
import threading
import time

import grpc

from . import _codec as C
from . import _memory
from . import _shared_memory as S
from . import _step_channel as R
from . import _step_socket as T
from . import _health_pb2 as health_pb
from . import _transport as X
from .errors import (Error, FailedPrecondition, Internal, InvalidArgument, NotFound,
                     Unavailable, error_for_code, from_rpc_error)
from .types import ServerInfo, SharedMemoryStatus
from .v1 import attention_pb2 as pb
from .v1 import attention_pb2_grpc as pb_grpc
from .v1 import shared_memory_pb2 as smpb
from .v1 import shared_memory_pb2_grpc as smpb_grpc
from .v1 import sessions_pb2 as spb
from .v1 import sessions_pb2_grpc as spb_grpc

HEALTH_CHECK = "/grpc.health.v1.Health/Check"


def stream_item(item):
    """(query, key, value, kwargs) of one attend_many item: a dict of attend's
    arguments (query, key, value and keywords) or a (query, key, value) tuple."""
    if isinstance(item, dict):
        kw = dict(item)
        try:
            return kw.pop("query"), kw.pop("key", None), kw.pop("value"), kw
        except KeyError as e:
            raise TypeError(f"attend_many: an item lacks {e.args[0]!r}") from None
    if isinstance(item, (tuple, list)) and len(item) == 3:
        return item[0], item[1], item[2], {}
    raise TypeError("attend_many: each item is a dict of attend's arguments or a "
                    f"(query, key, value) tuple, got {type(item).__name__}")


def model_item(item):
    if isinstance(item, dict):
        kw = dict(item)
        try:
            return kw.pop("hidden"), kw.pop("memory", None), kw
        except KeyError:
            raise TypeError("Model.many: an item lacks 'hidden'") from None
    return item, None, {}


class _Base:
    """What Client and AsyncClient share: settings, channels, metadata."""

    def __init__(self, target, *, tls=None, token=None, timeout=None, connections="auto",
                 retries=4, retain_heap=False, grpc_module=grpc):
        if not isinstance(target, str) or not target:
            raise TypeError(f"target: expected 'host:port', got {target!r}")
        fixed = X.connection_count(connections)
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout: must be > 0 seconds, got {timeout}")
        if retain_heap:
            _memory.retain_heap()
        self.target = target
        self.timeout = timeout
        self.connections = "auto" if fixed is None else fixed
        self._grpc = grpc_module
        self._credentials = X.credentials(tls)
        self._metadata = X.base_metadata(token)
        self._retry = X.RetryPolicy(attempts=int(retries) + 1)
        self._bootstrap = None
        self._stubs = None          # [(AttentionServiceStub, SessionServiceStub)]
        self._limits = None         # the ServerInfo the channels were sized from
        self._channels = []
        # Calls (and streams) in flight per data channel; guarded by _pool_lock,
        # which is never held across a call.
        self._in_flight = []
        self._pool_lock = threading.Lock()
        self._next = itertools.count()

    def _open_bootstrap(self):
        # GetServerInfo and health checks, before the limits are known; also the
        # first data channel when the server's limits are its defaults.
        self._bootstrap = self._channel(X.bootstrap_channel_options())
        self._boot_stub = pb_grpc.AttentionServiceStub(self._bootstrap)
        # Shared-memory registrations, Status and Unregister: small messages, and
        # a lease held open on a data channel would count as a call in flight.
        self._shm_stub = smpb_grpc.SharedMemoryServiceStub(self._bootstrap)
        self._health = self._bootstrap.unary_unary(
            HEALTH_CHECK, request_serializer=health_pb.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb.HealthCheckResponse.FromString)

    def _channel(self, options):
        if self._credentials is None:
            return self._grpc.insecure_channel(self.target, options=options)
        return self._grpc.secure_channel(self.target, self._credentials, options=options)

    def _open_data_channels(self, info):
        self._limits = info
        stubs = []
        for _ in range(1 if self.connections == "auto" else self.connections):
            self._add_data_channel(stubs)
        self._stubs = stubs

    def _add_data_channel(self, stubs):
        if not self._channels and X.bootstrap_serves_data(self._limits):
            c = self._bootstrap  # already connected: the first call needs no other
        else:
            c = self._channel(X.data_channel_options(self._limits, len(self._channels)))
        self._channels.append(c)
        self._in_flight.append(0)
        stubs.append((pb_grpc.AttentionServiceStub(c), spb_grpc.SessionServiceStub(c)))

    def _acquire(self):
        """The index of the data channel the next call goes on, counted as in
        flight until _release: the one with the fewest calls in flight (the
        first such after the last pick). With connections="auto", a new channel
        opens instead while every open one is busy and fewer than
        MAX_AUTO_CONNECTIONS are open."""
        with self._pool_lock:
            n = len(self._stubs)
            start = next(self._next)
            best = min(((start + k) % n for k in range(n)), key=self._in_flight.__getitem__)
            if (self._in_flight[best] > 0 and self.connections == "auto"
                    and n < X.MAX_AUTO_CONNECTIONS):
                self._add_data_channel(self._stubs)
                best = n
            self._in_flight[best] += 1
            return best

    def _release(self, index):
        with self._pool_lock:
            self._in_flight[index] -= 1

    @contextlib.contextmanager
    def _lease(self):
        """(AttentionServiceStub, SessionServiceStub) of a data channel for one
        call; the data channels must be open."""
        index = self._acquire()
        try:
            yield self._stubs[index]
        finally:
            self._release(index)

    @property
    def open_connections(self):
        """The data connections opened so far (grows to at most 8 with "auto")."""
        return len(self._channels)

    def _md(self, route=None):
        if route:
            return self._metadata + ((X.SESSION_ROUTE_HEADER, route),)
        return self._metadata

    def _timeout(self, timeout):
        return self.timeout if timeout is None else timeout

    def _new_region(self, status, name, size, key):
        """A SharedMemoryRegion with its object created and mapped (not yet
        registered), named after the server's prefix."""
        name = S.default_name() if name is None else name
        S.check_name(name)
        S.check_size(size)
        key = status.prefix + name if key is None else key
        S.check_key(key)
        region = self._region_class(name, key, size)
        region._create()
        return region

    @property
    def limits(self):
        """The ServerInfo the data channels were sized from (None before the first call)."""
        return self._limits


class SharedMemoryRegion(S.SharedMemoryRegion):
    """A registered region of Client.shared_memory; a context manager whose end
    unregisters it (ending the lease) and unmaps it."""

    def __init__(self, name, key, size):
        super().__init__(name, key, size)
        self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self, *, timeout=None):
        """Unregisters the region (the server's calls using it finish first) and
        unmaps it; idempotent."""
        if self._begin_close():
            client, call = self._client, self._call
            try:
                client._call(client._shm_stub.Unregister,
                             smpb.UnregisterSharedMemoryRequest(name=self.name),
                             timeout=timeout, idempotent=False)
            except Error:
                pass  # already gone (the lease ended): cancelling is all that is left
            finally:
                call.cancel()
        self._discard()


class Client(_Base):
    """A blocking client of one attnserve target.

    target: "host:port" (or any gRPC target, e.g. "dns:///svc:50051").
    tls: None (plain text), True (system roots), a CA file path or PEM bytes, or
      grpc.ChannelCredentials. token: bearer token sent on every call.
    timeout: default deadline of each call in seconds (None = none); every
      method also takes timeout=. connections: "auto" (default: one TCP
      connection, and another whenever a call starts while every open one is
      busy, up to 8) or a count in [1, 256]; each call goes to the connection
      with the fewest calls in flight (a stream stays on one). retries: retries of
      idempotent calls that fail with UNAVAILABLE, with exponential backoff.
      retain_heap: opt-in (default False: the allocator is left alone). True
      raises glibc's mmap and trim thresholds for the whole process, once, so
      that the MB-sized buffers of each call are reused instead of page-faulted
      in again (about half the round trip of MB-sized calls; attnserve/_memory.py).

    Thread-safe. The first data call reads the server's limits (GetServerInfo)
    and opens the data channels with matching message limits.
    """

    _region_class = SharedMemoryRegion

    def __init__(self, target, *, tls=None, token=None, timeout=None, connections="auto",
                 retries=4, retain_heap=False):
        super().__init__(target, tls=tls, token=token, timeout=timeout,
                         connections=connections, retries=retries, retain_heap=retain_heap)
        self._lock = threading.Lock()
        self._open_bootstrap()

    # -- plumbing -------------------------------------------------------------------
    def _call(self, method, request, *, timeout=None, idempotent, metadata=None):
        deadline = X.deadline_after(self._timeout(timeout))
        delays = self._retry.delays() if idempotent else iter(())
        md = self._metadata if metadata is None else metadata
        while True:
            try:
                return method(C.fresh(request), timeout=X.remaining(deadline),
                              metadata=md)
            except grpc.RpcError as e:
                err = e
            delay = next(delays, None) if X.is_retryable(err) else None
            left = X.remaining(deadline)
            if delay is None or (left is not None and left <= delay):
                raise from_rpc_error(err) from None
            time.sleep(delay)

    def _open(self):
        if self._stubs is None:
            with self._lock:
                if self._stubs is None:
                    info = self._call(self._boot_stub.GetServerInfo,
                                      pb.GetServerInfoRequest(), idempotent=True)
                    self._open_data_channels(info)

    def _data(self):
        """A lease of a data channel's stubs for one call (opening the data
        channels first): `with self._data() as (attention, sessions):`."""
        self._open()
        return self._lease()

    def close(self):
        for c in dict.fromkeys(self._channels + [self._bootstrap]):
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- AttentionService -----------------------------------------------------------
    def attend(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
               scale=None, enable_gqa=True, key_lengths=None, window=None,
               sink_tokens=0, alibi_slopes=None, softcap=None, sinks=None, relative_bias=None,
               relative_keys=None, alignment="top_left", layout="BHLD", return_weights=False,
               return_weight_stats=False, output_dtype=None, block_sparse=None, linear=None,
               lsh=None, shared_memory=None, out=None, timeout=None):
        """Scaled dot-product attention on the server; docs/python.md has every argument.

        The first arguments are torch's scaled_dot_product_attention(query, key,
        value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
        enable_gqa=False), so a call written for it runs here. dropout_p must be
        0 (inference only: no dropout). enable_gqa defaults to True: Hq a
        multiple of Hkv is grouped-query attention; False refuses Hq != Hkv, as
        torch does.

        softcap: logit soft-capping (Gemma 2), each scaled score t becoming
        softcap·tanh(t/softcap) before a float attn_mask and ALiBi are added.
        sinks: Hq attention-sink logits (gpt-oss), one more term exp(sinks[h])
        in each softmax denominator of head h. relative_bias: T5's bucketed
        relative position bias, an attnserve.RelativeBias (T5 scales no scores:
        pass scale=1.0 with it). relative_keys: relative position keys
        (Transformer-XL, Shaw et al.), an attnserve.RelativeKeys. sink_tokens:
        with a left window, the first keys stay attended outside it
        (StreamingLLM). Softmax attention only.

        Returns the output, or a tuple (output[, weights][, stats]) with
        return_weights and return_weight_stats (stats: an attnserve.WeightStats
        of each query row's entropy and largest weight, [B, Hq, Lq], computed
        without the weights).

        shared_memory: a region of shared_memory(): the tensors go through it
        (arrays are copied in for the call; SharedTensors of region.put are
        used in place) and the server writes the results there. out: a
        SharedTensor (region.empty) the output is written to; the call then
        returns a view of it instead of a copy."""
        req, kind, placed = C.shared_attend_request(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
            scale=scale, enable_gqa=enable_gqa, key_lengths=key_lengths, window=window,
            sink_tokens=sink_tokens, alibi_slopes=alibi_slopes, softcap=softcap, sinks=sinks,
            relative_bias=relative_bias, relative_keys=relative_keys, alignment=alignment,
            layout=layout, return_weights=return_weights,
            return_weight_stats=return_weight_stats,
            output_dtype=output_dtype, block_sparse=block_sparse, linear=linear, lsh=lsh,
            shared_memory=shared_memory, out=out)
        with C.released(placed):
            with self._data() as (stub, _):
                resp = self._call(*C.attend_call(stub, req), timeout=timeout,
                                  idempotent=True)
            return C.decode_attend(resp, kind, return_weights, placed)

    # -- SharedMemoryService --------------------------------------------------------
    def shared_memory_status(self, name="", *, timeout=None):
        """The server's registered regions (all, or `name`'s), prefix and limits."""
        return SharedMemoryStatus.from_proto(self._call(
            self._shm_stub.Status, smpb.SharedMemoryStatusRequest(name=name or ""),
            timeout=timeout, idempotent=True))

    def shared_memory(self, name=None, size=None, *, key=None, timeout=None):
        """Creates a POSIX shared-memory region of `size` bytes and registers it
        with the server (docs/python.md "Shared memory"); use it as a context
        manager: `with client.shared_memory("me", 64 << 20) as region:`.

        name: the region's name on the server (1-64 of [A-Za-z0-9_.-]; default
        py_<pid>_<n>); the object is "/" + key, key defaulting to the server's
        --shared_memory_prefix + name. The object is created 0600 and unlinked
        once the server has mapped it; the registration lasts until close()
        (or the with-block's end, also on an exception), or until this
        client's bootstrap connection drops.
        """
        status = self.shared_memory_status(timeout=timeout)
        region = self._new_region(status, name, size, key)
        call = None
        try:
            call = self._shm_stub.Register(
                smpb.RegisterSharedMemoryRequest(name=region.name, key=region.key,
                                                 byte_size=region.size),
                metadata=self._metadata)  # no deadline: the lease lasts as long as the region
            try:
                next(call)
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
            except StopIteration:
                raise Internal("shared memory: Register ended without its lease") from None
        except BaseException:
            if call is not None:
                call.cancel()
            region._discard()
            raise
        region._client = self
        region._leased(call)
        return region

    def attend_many(self, items, *, return_exceptions=False, timeout=None, **common):
        """Yields attend's result for each item, in order, over one AttendStream.

        items: an iterable of dicts of attend's arguments (query, key, value and
        keywords) or of (query, key, value) tuples; `common` keywords apply to
        every item. Requests are sent while results arrive (the server computes
        up to 16 of a stream at once). A failed item raises its Error, ending the
        stream, or with return_exceptions=True is yielded as the Error instance
        and the stream goes on.
        """
        def build(item):
            q, k, v, kw = stream_item(item)
            kw = {**common, **kw}
            req, kind = C.attend_request(q, k, v, **kw)
            return req, (kind, bool(kw.get("return_weights", False)))

        self._open()
        return self._pipeline(lambda stubs: stubs[0].AttendStream, build, items,
                              return_exceptions, timeout)

    def _pipeline(self, pick, build, items, return_exceptions, timeout):
        # The stream holds its data channel's lease while it lasts.
        with self._lease() as stubs:
            yield from self._stream(pick(stubs), build, items, return_exceptions, timeout)

    def _stream(self, method, build, items, return_exceptions, timeout):
        slots = queue.Queue()
        done = object()

        def requests():
            try:
                for item in items:
                    try:
                        req, ctx = build(item)
                    except Error as e:
                        slots.put((False, e))
                        continue
                    slots.put((True, ctx))
                    yield req
            except Exception as e:  # the caller's iterable failed, or a TypeError
                slots.put((None, e))
            finally:
                slots.put((done, None))

        call = method(requests(), timeout=self._timeout(timeout), metadata=self._metadata)

        def next_slot():
            # A call that fails at its start (auth, shutdown) may never take an
            # item: then no slot comes, and the call's own end is the answer.
            while True:
                try:
                    return slots.get(timeout=0.05)
                except queue.Empty:
                    if call.done() and slots.empty():
                        return True, None

        try:
            while True:
                sent, ctx = next_slot()
                if sent is done:
                    break
                if sent is None:
                    raise ctx
                if not sent:
                    if not return_exceptions:
                        raise ctx
                    yield ctx
                    continue
                try:
                    resp = next(call)
                except grpc.RpcError as e:
                    raise from_rpc_error(e) from None
                except StopIteration:
                    raise Internal("the stream ended before answering every request") from None
                if resp.error_code:
                    err = error_for_code(resp.error_code, resp.error_message)
                    if not return_exceptions:
                        raise err
                    yield err
                else:
                    yield C.decode_attend(resp, *ctx)
            try:
                next(call)
                raise Internal("the stream answered more messages than were sent")
            except StopIteration:
                pass
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
        finally:
            call.cancel()

    def server_info(self, *, timeout=None):
        """The server's version, ISA, limits, hosted models and session limits."""
        return ServerInfo.from_proto(self._call(
            self._boot_stub.GetServerInfo, pb.GetServerInfoRequest(), timeout=timeout,
            idempotent=True))

    def health(self, service="", *, timeout=None):
        """The standard health check: "SERVING", "NOT_SERVING", ..."""
        resp = self._call(self._health, health_pb.HealthCheckRequest(service=service),
                          timeout=timeout, idempotent=True)
        return health_pb.HealthCheckResponse.ServingStatus.Name(resp.status)

    def model(self, name):
        """A hosted attention layer: client.model("mha")(hidden, memory=...)."""
        return Model(self, name)

    # -- SessionService -------------------------------------------------------------
    def create_session(self, session_id="", *, num_kv_heads, head_dim, num_layers=1,
                       value_dim=0, storage_dtype="float32", max_tokens=1 << 24,
                       window_tokens=0, sink_tokens=0, ttl=None, route_key=None,
                       timeout=None):
        """Creates a KV-cache session (docs/sessions.md); returns its Session.

        An explicit session_id makes the call safe to retry (an existing session
        of the same shape is returned with created False); ttl is in seconds.
        window_tokens > 0 makes a sink + window session: each layer keeps its
        first sink_tokens tokens and its last window_tokens, at flat memory.
        """
        req = spb.CreateSessionRequest(
            session_id=session_id, ttl_ms=C.ttl_ms(ttl),
            shape=C.session_shape(num_kv_heads, head_dim, num_layers=num_layers,
                                  value_dim=value_dim, storage_dtype=storage_dtype,
                                  max_tokens=max_tokens, window_tokens=window_tokens,
                                  sink_tokens=sink_tokens))
        with self._data() as (_, stub):
            info = self._call(stub.CreateSession, req, timeout=timeout,
                              idempotent=bool(session_id),
                              metadata=self._md(route_key or session_id))
        return Session(self, info.session_id, route_key, C.session_info(info))

    def session(self, session_id, *, route_key=None):
        """A handle on an existing session (no call is made)."""
        return Session(self, session_id, route_key, None)

    def attend_sessions(self, layer, parts, *, causal=True, window_left=None,
                        alibi_slopes=None, scale=None, softcap=None, sinks=None,
                        relative_bias=None, return_weights=False, output_dtype=None,
                        route_key=None, timeout=None, return_weight_stats=False,
                        relative_keys=None):
        """One decode batch: parts are (session, query[, key, value[, position]])
        tuples (session a Session or an id); returns each part's output
        [Lnew, Hq, value_dim] (with return_weights and return_weight_stats,
        (output[, weights][, WeightStats of [Hq, Lnew]])) in order.
        softcap, sinks ([Hq]), relative_bias and relative_keys as in attend (a
        step is bottom-right: its queries are the layer's last positions)."""
        req, kinds, route, appends = _sessions_call(layer, parts, causal, window_left,
                                                    alibi_slopes, scale, softcap, sinks,
                                                    relative_bias, return_weights,
                                                    output_dtype, route_key,
                                                    return_weight_stats, relative_keys)
        with self._data() as (_, stub):
            resp = self._call(stub.AttendSessions, req, timeout=timeout,
                              idempotent=not appends, metadata=self._md(route))
        return C.decode_session_results(resp, kinds, return_weights)

    def session_stream(self, *, route_key=None, timeout=None):
        """A SessionStream: attend_sessions steps (any sessions, any layers) as
        messages of one AttendSessionsStream (docs/sessions.md, "Step streams").

        route_key: the routing header of the whole stream (its sessions must
        live on the replica it reaches). timeout: the whole stream's deadline in
        seconds; None (default) = none, not the client's per-call timeout.
        """
        self._open()
        return SessionStream(self, route_key, timeout)

    def step_channel(self, *, size=1 << 20, route_key=None, timeout=None,
                     spin=R.DEFAULT_SPIN, tcp=False, tcp_host=None, same_host=False):
        """A StepChannel: attend_sessions steps through a ring in a shared-memory
        region, or on a TCP socket of their own (tcp=True), instead of gRPC
        messages (docs/python.md "Through a step channel"). The server needs
        --step_channels and, for a ring, --shared_memory with this process on its
        host (x86-64 only: Unimplemented elsewhere); for TCP,
        --step_channel_listen.

        size: the region's bytes (at least 16 KiB; a 256-byte header, then the
        request and the response slot; not with tcp). route_key: the routing
        header of the channel's call. timeout: the whole channel's deadline in
        seconds; None (default) = none. spin: seconds a step polls for its
        answer before it sleeps (on the futex, or in select). tcp_host: where
        the TCP socket connects; None (default) = the host of the target.
        same_host: a TCP channel only to a server on this host, in this
        network namespace (FailedPrecondition otherwise, before connecting).
        """
        self._open()
        if tcp:
            return StepChannel(self, None, route_key, timeout, spin,
                               tcp_host or T.target_host(self.target), same_host)
        R.check_machine()
        region = self.shared_memory(size=size, timeout=timeout)
        try:
            return StepChannel(self, region, route_key, timeout, spin)
        except BaseException:
            region.close()
            raise

    def _session_call(self, name, request, session, *, idempotent, timeout):
        with self._data() as (_, stub):
            info = self._call(getattr(stub, name), request, timeout=timeout,
                              idempotent=idempotent, metadata=self._md(session.route))
        return C.session_info(info)

    def export_sessions(self, session_ids=(), *, remove=False, route_key=None, timeout=None):
        """The snapshots of the sessions (every live one when none are named), as
        bytes (docs/sessions.md, "Moving sessions"): what import_sessions, on this
        or another server, makes sessions of again. remove=True ends them on the
        server once exported (a move)."""
        ids = [str(i) for i in session_ids]
        req = spb.ExportSessionsRequest(session_ids=ids, remove=bool(remove))
        with self._data() as (_, stub):
            try:
                pieces = [c.data for c in stub.ExportSessions(
                    req, timeout=self._timeout(timeout),
                    metadata=self._md(route_key or (ids[0] if ids else None)))]
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
        return b"".join(pieces)

    def import_sessions(self, data, *, route_key=None, timeout=None):
        """Creates the sessions of snapshots (bytes, as export_sessions returns
        them); their SessionInfo, in order. DataLoss for snapshots that are
        truncated or corrupted, AlreadyExists for a session live here."""
        data = memoryview(data).cast("B")  # bytes, bytearray or any buffer, uncopied
        piece = 1 << 20
        chunks = (spb.SessionTransferChunk(data=bytes(data[i:i + piece]))
                  for i in range(0, len(data), piece))
        with self._data() as (_, stub):
            try:
                resp = stub.ImportSessions(chunks, timeout=self._timeout(timeout),
                                           metadata=self._md(route_key))
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
        return [C.session_info(i) for i in resp.sessions]

    def _append_stream(self, requests, session, timeout):
        with self._data() as (_, stub):
            try:
                info = stub.AppendKvStream(iter(requests), timeout=self._timeout(timeout),
                                           metadata=self._md(session.route))
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
        return C.session_info(info)


def _sessions_call(layer, parts, causal, window_left, alibi_slopes, scale, softcap, sinks,
                   relative_bias, return_weights, output_dtype, route_key,
                   return_weight_stats=False, relative_keys=None):
    tuples, ids = [], []
    appends = False
    for p in parts:
        if not isinstance(p, (tuple, list)) or not 2 <= len(p) <= 5:
            raise TypeError("attend_sessions: each part is (session, query[, key, value"
                            f"[, position]]), got {p!r}")
        s = p[0]
        handle = hasattr(s, "session_id")  # a Session or AsyncSession
        sid = s.session_id if handle else str(s)
        ids.append(s.route if handle else sid)
        rest = list(p[1:]) + [None] * (5 - len(p))
        appends |= rest[1] is not None
        tuples.append((sid, *rest))
    req, kinds = C.attend_sessions_request(
        layer, tuples, causal=causal, window_left=window_left, alibi_slopes=alibi_slopes,
        scale=scale, softcap=softcap, sinks=sinks, relative_bias=relative_bias,
        return_weights=return_weights, return_weight_stats=return_weight_stats,
        output_dtype=output_dtype, relative_keys=relative_keys)
    return req, kinds, route_key or (ids[0] if ids else None), appends


def _append_chunks(session_id, layer, key, value, position, chunk_tokens):
    n = int(key.shape[0])
    if int(value.shape[0]) != n:
        raise C.InvalidArgument(f"value: {int(value.shape[0])} tokens, key {n} (key and "
                                "value hold the same new tokens)")
    for start in range(0, n, chunk_tokens):
        stop = min(n, start + chunk_tokens)
        pos = None if position is None else position + start
        yield C.append_request(session_id, layer, key[start:stop], value[start:stop], pos)


class _SessionHandle:
    """What Session and attnserve.aio.AsyncSession share: the id, the routing
    key and what create_session answered."""

    def __init__(self, client, session_id, route_key, info):
        self.client = client
        self.session_id = session_id
        self.route = route_key or session_id
        self.created_info = info

    def __repr__(self):
        return f"{type(self).__name__}({self.session_id!r})"

    @property
    def created(self):
        """False when create_session found the session already there (a retry)."""
        return self.created_info.created if self.created_info else None


class Session(_SessionHandle):
    """A KV-cache session on the server (docs/sessions.md).

    Every call carries the routing header attnserve-session (the session id, or
    route_key) so that a load balancer keeps it on its replica. Closing is
    explicit (close(), or leaving a `with` block); otherwise the session ends
    after its TTL.
    """

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def info(self, *, timeout=None):
        return self.client._session_call(
            "GetSession", spb.GetSessionRequest(session_id=self.session_id), self,
            idempotent=True, timeout=timeout)

    def append(self, layer, key, value, *, position=None, chunk_tokens=None, timeout=None):
        """Appends new keys [Lnew, num_kv_heads, head_dim] and values to a layer.

        position (optional) must equal the tokens the layer holds. With
        chunk_tokens, the tokens go in chunks over one AppendKvStream (a prefill
        larger than one message); without, so do tokens that would pass the
        server's max_message_bytes in one message. Returns the SessionInfo after
        the call.
        """
        if chunk_tokens is None:
            req = C.append_request(self.session_id, layer, key, value, position)
            chunk_tokens = C.append_chunk_tokens(req, int(C.T.as_array(key).shape[0]),
                                                 self.client.limits)
            if chunk_tokens is None:
                return self.client._session_call("AppendKv", req, self,
                                                 idempotent=False, timeout=timeout)
        if int(chunk_tokens) < 1:
            raise ValueError(f"chunk_tokens: must be >= 1, got {chunk_tokens}")
        chunks = list(_append_chunks(self.session_id, layer, C.T.as_array(key),
                                     C.T.as_array(value), position, int(chunk_tokens)))
        return self.client._append_stream(chunks, self, timeout)

    def attend(self, layer, query, key=None, value=None, *, position=None, causal=True,
               window_left=None, alibi_slopes=None, scale=None, softcap=None, sinks=None,
               relative_bias=None, return_weights=False, output_dtype=None, timeout=None,
               return_weight_stats=False):
        """One step: appends key/value (when given), then attends query
        [Lnew, Hq, head_dim] over the layer's tokens; the output [Lnew, Hq, value_dim]
        (a tuple with return_weights or return_weight_stats, as attend_sessions')."""
        return self.client.attend_sessions(
            layer, [(self, query, key, value, position)], causal=causal,
            window_left=window_left, alibi_slopes=alibi_slopes, scale=scale,
            softcap=softcap, sinks=sinks, relative_bias=relative_bias,
            return_weights=return_weights, output_dtype=output_dtype,
            route_key=self.route, timeout=timeout,
            return_weight_stats=return_weight_stats)[0]

    def fork(self, child_id="", *, ttl=None, timeout=None):
        """A child sharing every block copy-on-write; returns its Session."""
        info = self.client._session_call(
            "ForkSession", spb.ForkSessionRequest(session_id=self.session_id,
                                                  child_id=child_id, ttl_ms=C.ttl_ms(ttl)),
            self, idempotent=False, timeout=timeout)
        # The child lives on the parent's replica: route it with the parent's key.
        return Session(self.client, info.session_id, self.route, info)

    def truncate(self, tokens, *, timeout=None):
        return self.client._session_call(
            "TruncateSession", spb.TruncateSessionRequest(session_id=self.session_id,
                                                          tokens=int(tokens)),
            self, idempotent=True, timeout=timeout)

    def close(self, *, timeout=None):
        return self.client._session_call(
            "CloseSession", spb.CloseSessionRequest(session_id=self.session_id), self,
            idempotent=False, timeout=timeout)


_END_OF_STEPS = object()


class _StepStream:
    """What SessionStream and attnserve.aio.AsyncSessionStream share: the data
    connection they hold, the step's request and answer, the end."""

    def __init__(self, client, open_call):
        self.client = client
        self._index = client._acquire()
        self._closed = False
        try:
            self._call = open_call(client._stubs[self._index][1])
        except BaseException:
            client._release(self._index)
            raise

    @staticmethod
    def _request(layer, parts, causal, window_left, alibi_slopes, scale, softcap, sinks,
                 relative_bias, return_weights, output_dtype, return_weight_stats,
                 relative_keys):
        req, kinds, _, _ = _sessions_call(layer, parts, causal, window_left, alibi_slopes,
                                          scale, softcap, sinks, relative_bias,
                                          return_weights, output_dtype, None,
                                          return_weight_stats, relative_keys)
        return req, kinds

    @staticmethod
    def _answer(resp, kinds, return_weights):
        if resp.error_code:
            raise error_for_code(resp.error_code, resp.error_message)
        return C.decode_session_results(resp, kinds, return_weights)

    _kind = "stream"

    @property
    def closed(self):
        """Whether it has ended (closed, or its call over): a step raises ValueError."""
        return self._closed

    def _check_open(self):
        if self._closed:
            raise ValueError(f"attend_sessions: the {self._kind} is closed")

    def _end(self):
        if not self._closed:
            self._closed = True
            self._call.cancel()
            self.client._release(self._index)


class _BlockingSteps(_StepStream):
    """What SessionStream and StepChannel share: the `with` block and
    attend_sessions around one step's exchange (_exchange: a request in, its
    AttendSessionsResponse out)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def attend_sessions(self, layer, parts, *, causal=True, window_left=None,
                        alibi_slopes=None, scale=None, softcap=None, sinks=None,
                        relative_bias=None, return_weights=False, output_dtype=None,
                        route_key=None, timeout=None, return_weight_stats=False,
                        relative_keys=None):
        """As Client.attend_sessions; route_key and timeout are the stream's or
        channel's (given when it was opened) and are ignored here."""
        req, kinds = self._request(layer, parts, causal, window_left, alibi_slopes, scale,
                                   softcap, sinks, relative_bias, return_weights,
                                   output_dtype, return_weight_stats, relative_keys)
        return self._answer(self._exchange(req), kinds, return_weights)


class SessionStream(_BlockingSteps):
    """Steps over one AttendSessionsStream (Client.session_stream).

    attend_sessions takes and returns what Client.attend_sessions does; a step
    the server refuses raises its error and the stream goes on (as for the
    unary call, a step refused before its appends leaves its sessions
    unchanged). One step at a time (calls from several threads take turns).
    close() ends the stream; so does leaving a `with` block. The stream holds
    one of the client's data connections while it is open. Behind a load
    balancer, give session_stream the route_key of its sessions.
    """

    def __init__(self, client, route_key, timeout):
        self._lock = threading.Lock()
        self._requests = queue.SimpleQueue()
        super().__init__(client, lambda stub: stub.AttendSessionsStream(
            iter(self._requests.get, _END_OF_STEPS), timeout=timeout,
            metadata=client._md(route_key)))

    def _exchange(self, req):
        with self._lock:
            self._check_open()
            self._requests.put(req)
            try:
                resp = next(self._call)
            except grpc.RpcError as e:
                self._end()
                raise from_rpc_error(e) from None
            except StopIteration:
                self._end()
                raise Internal("the stream ended before answering the step") from None
        return resp

    def close(self):
        """Ends the stream (its steps are all answered by then)."""
        with self._lock:
            if self._closed:
                return
            self._requests.put(_END_OF_STEPS)
            try:
                for _ in self._call:
                    raise Internal("the stream answered more messages than were sent")
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
            finally:
                self._end()

    def _end(self):
        # gRPC's thread that reads the steps waits on the queue until its end.
        self._requests.put(_END_OF_STEPS)
        super()._end()


def _open_channel_request(region):
    """The StepChannel call's request: a ring in `region`, or TCP when None."""
    if region is None:
        return spb.OpenStepChannelRequest(tcp=True)
    return spb.OpenStepChannelRequest(region=region.name)


def _channel_link(info, region, spin, host, same_host=False):
    """An opened step channel's ring (in `region`) or socket (TCP, to `host`);
    with same_host, FailedPrecondition before connecting when the server's
    host and network namespace are not this process's."""
    if same_host and region is None and (not info.host_id or info.host_id != T.host_id()):
        raise FailedPrecondition("tcp: the server does not run on this host (in this "
                                 "network namespace); same_host=True connects only there")
    if region is not None:
        return R.Ring(region._map, region.size, spin)
    return T.Socket(host, info.tcp_port, info.tcp_token, info.request_capacity,
                    info.response_capacity, spin)


class StepChannel(_BlockingSteps):
    """Steps through a step channel (Client.step_channel): each step's request
    and answer go through a ring in a shared-memory region of the channel's own
    (same host), or as frames on a TCP socket of its own (tcp=True), the
    StepChannel call staying open beside it.

    attend_sessions takes and returns what Client.attend_sessions does; a step
    the server refuses raises its error and the channel goes on. When the
    server ends the channel (it drains) or its call ends, the step raises
    (Unavailable, or the call's error) and the channel is closed. One step at
    a time (calls from several threads take turns). close() hangs up, waits
    for the server to free the channel (so another may be opened at once),
    and closes the region (or the socket); so does leaving a `with` block.
    """

    _kind = "step channel"

    def __init__(self, client, region, route_key, timeout, spin, host=None,
                 same_host=False):
        self._lock = threading.Lock()
        self._link = None
        self.region = region
        super().__init__(client, lambda stub: stub.StepChannel(
            _open_channel_request(region), timeout=timeout,
            metadata=client._md(route_key)))
        try:
            info = next(self._call)
            self._link = _channel_link(info, region, spin, host, same_host)
        except grpc.RpcError as e:
            self._end()
            raise from_rpc_error(e) from None
        except StopIteration:
            self._end()
            raise Internal("the step channel's call ended before the ring was ready") from None
        except BaseException:
            self._end()
            raise
        self.request_capacity = self._link.request_capacity
        self.response_capacity = self._link.response_capacity
        self.server_spin = info.spin_us / 1e6  # seconds the server polls before sleeping

    def _exchange(self, req):
        return spb.AttendSessionsResponse.FromString(self.step_bytes(req.SerializeToString()))

    def step_bytes(self, request):
        """One step of a serialized AttendSessionsRequest (any bytes: the server
        answers what it cannot parse with INVALID_ARGUMENT); the serialized
        AttendSessionsResponse. InvalidArgument, the channel going on, for bytes
        larger than the request slot (request_capacity)."""
        with self._lock:
            self._check_open()
            try:
                return self._link.call(request, self._alive)
            except InvalidArgument:
                raise  # nothing was written
            except BaseException:
                self._shut()  # the server may still answer: the ring is no one's now
                raise

    def _alive(self):
        if self._call.done():
            code = self._call.code()
            if code == grpc.StatusCode.OK:
                raise Unavailable("the step channel's call ended")
            raise error_for_code(code, self._call.details() or "")

    # How long close() waits for the server to end the call after hanging up.
    _HANGUP_WAIT = 5.0

    def close(self):
        """Hangs up, waits until the server has freed the channel and ended its
        call (up to 5 s, then cancels it), and closes the region; idempotent."""
        with self._lock:
            if self._link is not None and not self._call.done():
                ended = threading.Event()
                self._call.add_done_callback(lambda _: ended.set())
                self._link.hangup()
                ended.wait(self._HANGUP_WAIT)
            self._shut()

    def _shut(self):
        if self._link is not None:
            self._link.release()
            self._link = None
        self._end()
        if self.region is not None:
            self.region.close()


class Model:
    """A hosted attention layer of the server (docs/models.md)."""

    def __init__(self, client, name):
        self.client = client
        self.name = name

    def __repr__(self):
        return f"Model({self.name!r})"

    @property
    def info(self):
        """Its ModelInfo from GetServerInfo (d_model, heads, config)."""
        return _find_model(self.client.server_info(), self.name)

    def __call__(self, hidden, memory=None, *, timeout=None, **kw):
        """hidden [B, Lq, d_model] (memory [B, Lk, d_model] for cross-attention);
        keywords as attend's mask arguments, plus positions and return_weights."""
        req, kind = C.model_request(self.name, hidden, memory, **kw)
        with self.client._data() as (stub, _):
            resp = self.client._call(stub.AttendModel, req, timeout=timeout, idempotent=True)
        return C.decode_attend(resp, kind, kw.get("return_weights", False))

    def many(self, items, *, return_exceptions=False, timeout=None, **common):
        """As Client.attend_many over AttendModelStream; items are hidden states or
        dicts of this call's arguments."""
        def build(item):
            h, m, kw = model_item(item)
            kw = {**common, **kw}
            req, kind = C.model_request(self.name, h, m, **kw)
            return req, (kind, bool(kw.get("return_weights", False)))

        self.client._open()
        return self.client._pipeline(lambda stubs: stubs[0].AttendModelStream, build, items,
                                     return_exceptions, timeout)


def _find_model(info, name):
    for m in info.models:
        if m.name == name:
            return m
    hosted = ", ".join(m.name for m in info.models) or "none"
    raise NotFound(f"model {name!r} is not hosted by this server (hosted: {hosted})")
