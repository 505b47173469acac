"""attnserve.AsyncClient: Client's methods as coroutines over grpc.aio.

Channels are opened inside the running event loop on first use; use one
AsyncClient per loop. `attend_many` and `Model.many` are async generators.
"""

import asyncio
import threading

import grpc
import grpc.aio

from . import _codec as C
from . import _health_pb2 as health_pb
from . import _shared_memory as S
from . import _step_channel as R
from . import _step_socket as T
from . import _transport as X
from .client import (_Base, _SessionHandle, _StepStream, _append_chunks, _channel_link,
                     _find_model, _open_channel_request, _sessions_call, model_item,
                     stream_item)
from .errors import (Error, Internal, InvalidArgument, Unavailable, error_for_code,
                     from_rpc_error)
from .types import ServerInfo, SharedMemoryStatus
from .v1 import attention_pb2 as pb
from .v1 import sessions_pb2 as spb
from .v1 import shared_memory_pb2 as smpb


async def _aiter(items):
    if hasattr(items, "__aiter__"):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


class AsyncSharedMemoryRegion(S.SharedMemoryRegion):
    """As attnserve.SharedMemoryRegion; close() is a coroutine and the region
    an async context manager (put, empty and free are the same)."""

    def __init__(self, name, key, size):
        super().__init__(name, key, size)
        self._client = None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def close(self, *, timeout=None):
        if self._begin_close():
            client, call = self._client, self._call
            try:
                await client._call(client._shm_stub.Unregister,
                                   smpb.UnregisterSharedMemoryRequest(name=self.name),
                                   timeout=timeout, idempotent=False)
            except Error:
                pass
            finally:
                call.cancel()
        self._discard()


class _OpeningRegion:
    """AsyncClient.shared_memory's result: await it for the region, or use it
    as `async with` (the region closes at the block's end)."""

    def __init__(self, opening):
        self._opening = opening
        self._region = None

    def __await__(self):
        return self._opening.__await__()

    async def __aenter__(self):
        self._region = await self._opening
        return self._region

    async def __aexit__(self, *exc):
        await self._region.close()


class AsyncClient(_Base):
    """As attnserve.Client (same arguments and methods), with coroutines."""

    _region_class = AsyncSharedMemoryRegion

    def __init__(self, target, *, tls=None, token=None, timeout=None, connections="auto",
                 retries=4, retain_heap=False):
        super().__init__(target, tls=tls, token=token, timeout=timeout,
                         connections=connections, retries=retries, retain_heap=retain_heap,
                         grpc_module=grpc.aio)
        self._lock = None

    async def _ready(self):
        if self._bootstrap is None:
            self._open_bootstrap()
            self._lock = asyncio.Lock()

    async def _call(self, method, request, *, timeout=None, idempotent, metadata=None):
        await self._ready()
        deadline = X.deadline_after(self._timeout(timeout))
        delays = self._retry.delays() if idempotent else iter(())
        md = self._metadata if metadata is None else metadata
        while True:
            try:
                return await method(C.fresh(request), timeout=X.remaining(deadline),
                                    metadata=md)
            except grpc.RpcError as e:
                err = e
            delay = next(delays, None) if X.is_retryable(err) else None
            left = X.remaining(deadline)
            if delay is None or (left is not None and left <= delay):
                raise from_rpc_error(err) from None
            await asyncio.sleep(delay)

    async def _open(self):
        await self._ready()
        if self._stubs is None:
            async with self._lock:
                if self._stubs is None:
                    info = await self._call(self._boot_stub.GetServerInfo,
                                            pb.GetServerInfoRequest(), idempotent=True)
                    self._open_data_channels(info)

    async def _data(self):
        """As Client._data: `with await self._data() as (attention, sessions):`."""
        await self._open()
        return self._lease()

    async def close(self):
        for c in dict.fromkeys(self._channels + ([self._bootstrap] if self._bootstrap else [])):
            await c.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def attend(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                     *, return_weights=False, timeout=None, **kw):
        """As Client.attend (SDPA's arguments, shared_memory= and out= included)."""
        req, kind, placed = C.shared_attend_request(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
            return_weights=return_weights, **kw)
        with C.released(placed):
            with await self._data() as (stub, _):
                resp = await self._call(*C.attend_call(stub, req), timeout=timeout,
                                        idempotent=True)
            return C.decode_attend(resp, kind, return_weights, placed)

    async def shared_memory_status(self, name="", *, timeout=None):
        """As Client.shared_memory_status."""
        await self._ready()
        return SharedMemoryStatus.from_proto(await self._call(
            self._shm_stub.Status, smpb.SharedMemoryStatusRequest(name=name or ""),
            timeout=timeout, idempotent=True))

    def shared_memory(self, name=None, size=None, *, key=None, timeout=None):
        """As Client.shared_memory: `async with client.shared_memory(...) as region:`
        or `region = await client.shared_memory(...)` (then `await region.close()`)."""
        return _OpeningRegion(self._open_region(name, size, key, timeout))

    async def _open_region(self, name, size, key, timeout):
        status = await self.shared_memory_status(timeout=timeout)
        region = self._new_region(status, name, size, key)
        call = None
        try:
            call = self._shm_stub.Register(
                smpb.RegisterSharedMemoryRequest(name=region.name, key=region.key,
                                                 byte_size=region.size),
                metadata=self._metadata)
            try:
                lease = await call.read()
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
            if lease is grpc.aio.EOF:
                raise Internal("shared memory: Register ended without its lease")
        except BaseException:
            if call is not None:
                call.cancel()
            region._discard()
            raise
        region._client = self
        region._leased(call)
        return region

    async def attend_many(self, items, *, return_exceptions=False, timeout=None, **common):
        """As Client.attend_many; items may be an iterable or an async iterable."""
        def build(item):
            q, k, v, kw = stream_item(item)
            kw = {**common, **kw}
            req, kind = C.attend_request(q, k, v, **kw)
            return req, (kind, bool(kw.get("return_weights", False)))

        async for out in self._pipeline(lambda stubs: stubs[0].AttendStream, build, items,
                                        return_exceptions, timeout):
            yield out

    async def _pipeline(self, pick, build, items, return_exceptions, timeout):
        # The stream holds its data channel's lease while it lasts.
        with await self._data() as stubs:
            async for out in self._stream(pick(stubs), build, items, return_exceptions,
                                          timeout):
                yield out

    async def _stream(self, method, build, items, return_exceptions, timeout):
        call = method(timeout=self._timeout(timeout), metadata=self._metadata)
        slots = asyncio.Queue()
        done = object()

        async def writer():
            try:
                async for item in _aiter(items):
                    try:
                        req, ctx = build(item)
                    except Error as e:
                        await slots.put((False, e))
                        continue
                    await slots.put((True, ctx))
                    await call.write(req)
                await call.done_writing()
            except Exception as e:
                await slots.put((None, e))
            finally:
                await slots.put((done, None))

        task = asyncio.ensure_future(writer())
        try:
            while True:
                sent, ctx = await slots.get()
                if sent is done:
                    break
                if sent is None:
                    if isinstance(ctx, grpc.RpcError):
                        raise from_rpc_error(ctx) from None
                    raise ctx
                if not sent:
                    if not return_exceptions:
                        raise ctx
                    yield ctx
                    continue
                try:
                    resp = await call.read()
                except grpc.RpcError as e:
                    raise from_rpc_error(e) from None
                if resp is grpc.aio.EOF:
                    raise Internal("the stream ended before answering every request")
                if resp.error_code:
                    err = error_for_code(resp.error_code, resp.error_message)
                    if not return_exceptions:
                        raise err
                    yield err
                else:
                    yield C.decode_attend(resp, *ctx)
            try:
                if await call.read() is not grpc.aio.EOF:
                    raise Internal("the stream answered more messages than were sent")
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
        finally:
            task.cancel()
            call.cancel()

    async def server_info(self, *, timeout=None):
        await self._ready()
        return ServerInfo.from_proto(await self._call(
            self._boot_stub.GetServerInfo, pb.GetServerInfoRequest(), timeout=timeout,
            idempotent=True))

    async def health(self, service="", *, timeout=None):
        await self._ready()
        resp = await self._call(self._health, health_pb.HealthCheckRequest(service=service),
                                timeout=timeout, idempotent=True)
        return health_pb.HealthCheckResponse.ServingStatus.Name(resp.status)

    def model(self, name):
        return AsyncModel(self, name)

    async def create_session(self, session_id="", *, num_kv_heads, head_dim, num_layers=1,
                             value_dim=0, storage_dtype="float32", max_tokens=1 << 24,
                             window_tokens=0, sink_tokens=0, ttl=None, route_key=None,
                             timeout=None):
        req = spb.CreateSessionRequest(
            session_id=session_id, ttl_ms=C.ttl_ms(ttl),
            shape=C.session_shape(num_kv_heads, head_dim, num_layers=num_layers,
                                  value_dim=value_dim, storage_dtype=storage_dtype,
                                  max_tokens=max_tokens, window_tokens=window_tokens,
                                  sink_tokens=sink_tokens))
        with await self._data() as (_, stub):
            info = await self._call(stub.CreateSession, req, timeout=timeout,
                                    idempotent=bool(session_id),
                                    metadata=self._md(route_key or session_id))
        return AsyncSession(self, info.session_id, route_key, C.session_info(info))

    def session(self, session_id, *, route_key=None):
        return AsyncSession(self, session_id, route_key, None)

    async def attend_sessions(self, layer, parts, *, causal=True, window_left=None,
                              alibi_slopes=None, scale=None, softcap=None, sinks=None,
                              relative_bias=None, return_weights=False, output_dtype=None,
                              route_key=None, timeout=None, return_weight_stats=False,
                              relative_keys=None):
        req, kinds, route, appends = _sessions_call(layer, parts, causal, window_left,
                                                    alibi_slopes, scale, softcap, sinks,
                                                    relative_bias, return_weights,
                                                    output_dtype, route_key,
                                                    return_weight_stats, relative_keys)
        with await self._data() as (_, stub):
            resp = await self._call(stub.AttendSessions, req, timeout=timeout,
                                    idempotent=not appends, metadata=self._md(route))
        return C.decode_session_results(resp, kinds, return_weights)

    async def session_stream(self, *, route_key=None, timeout=None):
        """As Client.session_stream: an AsyncSessionStream."""
        await self._open()
        return AsyncSessionStream(self, route_key, timeout)

    async def step_channel(self, *, size=1 << 20, route_key=None, timeout=None,
                           spin=R.DEFAULT_SPIN, tcp=False, tcp_host=None, same_host=False):
        """As Client.step_channel: an AsyncStepChannel (`async with await
        client.step_channel() as steps:`)."""
        await self._open()
        region, host = None, None
        if tcp:
            host = tcp_host or T.target_host(self.target)
        else:
            R.check_machine()
            region = await self.shared_memory(size=size, timeout=timeout)
        try:
            channel = AsyncStepChannel(self, region, route_key, timeout, spin, host, same_host)
        except BaseException:
            if region is not None:
                await region.close()
            raise
        await channel._start()
        return channel

    async def _session_call(self, name, request, session, *, idempotent, timeout):
        with await self._data() as (_, stub):
            info = await self._call(getattr(stub, name), request, timeout=timeout,
                                    idempotent=idempotent, metadata=self._md(session.route))
        return C.session_info(info)

    async def export_sessions(self, session_ids=(), *, remove=False, route_key=None,
                              timeout=None):
        """As Client.export_sessions: the sessions' snapshots as bytes."""
        ids = [str(i) for i in session_ids]
        req = spb.ExportSessionsRequest(session_ids=ids, remove=bool(remove))
        with await self._data() as (_, stub):
            try:
                call = stub.ExportSessions(
                    req, timeout=self._timeout(timeout),
                    metadata=self._md(route_key or (ids[0] if ids else None)))
                pieces = [c.data async for c in call]
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
        return b"".join(pieces)

    async def import_sessions(self, data, *, route_key=None, timeout=None):
        """As Client.import_sessions: the SessionInfo of each session created."""
        data = memoryview(data).cast("B")  # bytes, bytearray or any buffer, uncopied
        piece = 1 << 20
        with await self._data() as (_, stub):
            try:
                call = stub.ImportSessions(timeout=self._timeout(timeout),
                                           metadata=self._md(route_key))
                for i in range(0, len(data), piece):
                    await call.write(spb.SessionTransferChunk(data=bytes(data[i:i + piece])))
                await call.done_writing()
                resp = await call
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
        return [C.session_info(i) for i in resp.sessions]

    async def _append_stream(self, requests, session, timeout):
        with await self._data() as (_, stub):
            try:
                call = stub.AppendKvStream(timeout=self._timeout(timeout),
                                           metadata=self._md(session.route))
                for r in requests:
                    await call.write(r)
                await call.done_writing()
                info = await call
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
        return C.session_info(info)


class _AsyncSteps(_StepStream):
    """What AsyncSessionStream and AsyncStepChannel share: `async with`, which
    ends in close(), and attend_sessions around one step's exchange (_exchange:
    a request in, its AttendSessionsResponse out)."""

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def attend_sessions(self, layer, parts, *, causal=True, window_left=None,
                              alibi_slopes=None, scale=None, softcap=None, sinks=None,
                              relative_bias=None, return_weights=False, output_dtype=None,
                              route_key=None, timeout=None, return_weight_stats=False,
                              relative_keys=None):
        """As SessionStream.attend_sessions."""
        req, kinds = self._request(layer, parts, causal, window_left, alibi_slopes, scale,
                                   softcap, sinks, relative_bias, return_weights,
                                   output_dtype, return_weight_stats, relative_keys)
        return self._answer(await self._exchange(req), kinds, return_weights)


class AsyncSessionStream(_AsyncSteps):
    """As SessionStream, with coroutines: `async with await
    client.session_stream() as steps: out = await steps.attend_sessions(...)`."""

    def __init__(self, client, route_key, timeout):
        self._lock = asyncio.Lock()
        super().__init__(client, lambda stub: stub.AttendSessionsStream(
            timeout=timeout, metadata=client._md(route_key)))

    async def _exchange(self, req):
        async with self._lock:
            self._check_open()
            try:
                await self._call.write(req)
                resp = await self._call.read()
            except grpc.RpcError as e:
                self._end()
                raise from_rpc_error(e) from None
            except BaseException:
                # Cancelled mid-step (asyncio.wait_for, a task's cancel): the
                # call is cancelled with it, so the stream ends here.
                self._end()
                raise
            if resp is grpc.aio.EOF:
                self._end()
                raise Internal("the stream ended before answering the step")
        return resp

    async def close(self):
        """Ends the stream (its steps are all answered by then)."""
        async with self._lock:
            if self._closed:
                return
            try:
                await self._call.done_writing()
                if await self._call.read() is not grpc.aio.EOF:
                    raise Internal("the stream answered more messages than were sent")
                code = await self._call.code()
                if code != grpc.StatusCode.OK:
                    raise error_for_code(code, await self._call.details())
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
            finally:
                self._end()


class _CallEnded(Exception):
    """Raised in the executor thread of a step when the channel's call ended."""


class AsyncStepChannel(_AsyncSteps):
    """As StepChannel, with coroutines: `async with await client.step_channel() as
    steps: out = await steps.attend_sessions(...)`. A step's wait for its answer
    (polling, then the futex) runs on a thread of the event loop's default
    executor, so the loop goes on meanwhile. A step cancelled while it waits (a
    task's cancel, asyncio.wait_for) ends the channel: the server may still
    answer it, so the ring is no one's any more."""

    _kind = "step channel"
    _HANGUP_WAIT = 5.0

    def __init__(self, client, region, route_key, timeout, spin, host=None,
                 same_host=False):
        self._lock = asyncio.Lock()
        self._link = None
        self._ended = threading.Event()  # the call is done (set on the loop)
        self.region = region
        self._spin = spin
        self._host = host
        self._same_host = same_host
        super().__init__(client, lambda stub: stub.StepChannel(
            _open_channel_request(region), timeout=timeout,
            metadata=client._md(route_key)))
        self._call.add_done_callback(lambda _: self._ended.set())

    async def _start(self):
        try:
            try:
                info = await self._call.read()
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
            if info is grpc.aio.EOF:
                raise await self._call_error()
            # Off the loop: a TCP channel's connect may take a while.
            self._link = await asyncio.get_running_loop().run_in_executor(
                None, _channel_link, info, self.region, self._spin, self._host,
                self._same_host)
        except BaseException:
            await self._shut()
            raise
        self.request_capacity = self._link.request_capacity
        self.response_capacity = self._link.response_capacity
        self.server_spin = info.spin_us / 1e6

    async def _exchange(self, req):
        answer = await self.step_bytes(req.SerializeToString())
        return spb.AttendSessionsResponse.FromString(answer)

    async def step_bytes(self, request):
        """As StepChannel.step_bytes."""
        async with self._lock:
            self._check_open()
            step = asyncio.get_running_loop().run_in_executor(
                None, self._link.call, request, self._alive)
            try:
                return await asyncio.shield(step)
            except InvalidArgument:
                raise  # nothing was written
            except _CallEnded:
                error = await self._call_error()
                await self._shut()
                raise error from None
            except asyncio.CancelledError:
                # The thread still waits on the ring: end the call, so that the
                # server closes the ring and the thread returns, before the
                # region goes.
                self._call.cancel()
                await asyncio.gather(step, return_exceptions=True)
                await self._shut()
                raise
            except BaseException:
                await self._shut()
                raise

    def _alive(self):
        if self._ended.is_set():
            raise _CallEnded()

    async def _call_error(self):
        code = await self._call.code()
        if code == grpc.StatusCode.OK:
            return Unavailable("the step channel's call ended")
        return error_for_code(code, await self._call.details() or "")

    async def close(self):
        """As StepChannel.close: hangs up, waits (up to 5 s) for the server to free
        the channel, and closes the region; idempotent."""
        async with self._lock:
            if self._link is not None and not self._ended.is_set():
                self._link.hangup()
                try:
                    await asyncio.wait_for(self._call.code(), self._HANGUP_WAIT)
                except (asyncio.TimeoutError, grpc.RpcError):
                    pass
            await self._shut()

    async def _shut(self):
        if self._link is not None:
            self._link.release()
            self._link = None
        self._end()
        if self.region is not None:
            await self.region.close()


class AsyncSession(_SessionHandle):
    """As attnserve.Session, with coroutines."""

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def info(self, *, timeout=None):
        return await self.client._session_call(
            "GetSession", spb.GetSessionRequest(session_id=self.session_id), self,
            idempotent=True, timeout=timeout)

    async def append(self, layer, key, value, *, position=None, chunk_tokens=None,
                     timeout=None):
        if chunk_tokens is None:
            req = C.append_request(self.session_id, layer, key, value, position)
            chunk_tokens = C.append_chunk_tokens(req, int(C.T.as_array(key).shape[0]),
                                                 self.client.limits)
            if chunk_tokens is None:
                return await self.client._session_call("AppendKv", req, self,
                                                   idempotent=False, timeout=timeout)
        if int(chunk_tokens) < 1:
            raise ValueError(f"chunk_tokens: must be >= 1, got {chunk_tokens}")
        chunks = list(_append_chunks(self.session_id, layer, C.T.as_array(key),
                                     C.T.as_array(value), position, int(chunk_tokens)))
        return await self.client._append_stream(chunks, self, timeout)

    async def attend(self, layer, query, key=None, value=None, *, position=None,
                     timeout=None, **kw):
        return (await self.client.attend_sessions(
            layer, [(self, query, key, value, position)], route_key=self.route,
            timeout=timeout, **kw))[0]

    async def fork(self, child_id="", *, ttl=None, timeout=None):
        info = await self.client._session_call(
            "ForkSession", spb.ForkSessionRequest(session_id=self.session_id,
                                                  child_id=child_id, ttl_ms=C.ttl_ms(ttl)),
            self, idempotent=False, timeout=timeout)
        return AsyncSession(self.client, info.session_id, self.route, info)

    async def truncate(self, tokens, *, timeout=None):
        return await self.client._session_call(
            "TruncateSession", spb.TruncateSessionRequest(session_id=self.session_id,
                                                          tokens=int(tokens)),
            self, idempotent=True, timeout=timeout)

    async def close(self, *, timeout=None):
        return await self.client._session_call(
            "CloseSession", spb.CloseSessionRequest(session_id=self.session_id), self,
            idempotent=False, timeout=timeout)


class AsyncModel:
    """As attnserve.Model, with coroutines."""

    def __init__(self, client, name):
        self.client = client
        self.name = name

    async def info(self):
        return _find_model(await self.client.server_info(), self.name)

    async def __call__(self, hidden, memory=None, *, timeout=None, **kw):
        req, kind = C.model_request(self.name, hidden, memory, **kw)
        with await self.client._data() as (stub, _):
            resp = await self.client._call(stub.AttendModel, req, timeout=timeout,
                                           idempotent=True)
        return C.decode_attend(resp, kind, kw.get("return_weights", False))

    async def many(self, items, *, return_exceptions=False, timeout=None, **common):
        def build(item):
            h, m, kw = model_item(item)
            kw = {**common, **kw}
            req, kind = C.model_request(self.name, h, m, **kw)
            return req, (kind, bool(kw.get("return_weights", False)))

        async for out in self.client._pipeline(lambda stubs: stubs[0].AttendModelStream,
                                               build, items, return_exceptions, timeout):
            yield out
