"""Decode offload for PyTorch models: the KV cache of a batch of sequences on attnserve.

    import attnserve
    from attnserve.torch import KVCache

    client = attnserve.Client("localhost:50051", timeout=60)
    with KVCache(client, num_layers=32, num_kv_heads=8, head_dim=128) as cache:
        ...                                   # in each decoder layer, instead of SDPA:
        out = cache.attend(layer, q, k, v)    # q [B, Hq, T, D], k, v [B, Hkv, T, D]

Each sequence of the batch is one KV-cache session on the server
(docs/sessions.md). A layer call sends only the new tokens of every sequence:
one AttendSessions call for the whole batch appends their keys and values and
returns their attention, causal with bottom-right alignment, which is what
torch.nn.functional.scaled_dot_product_attention computes over the full cache.
docs/python.md ("Decode offload from PyTorch") explains the loop.

This module imports torch; `import attnserve` alone does not.
"""

import inspect
import itertools
import numbers
import time
import uuid

import torch

from ._codec import relative_bias_message
from ._step_codec import StepCodec
from ._step_socket import is_loopback, target_host
from ._transport import RESPONSE_ENVELOPE_BYTES
from .client import Client
from .errors import Error, FailedPrecondition, NotFound, Unavailable, Unimplemented

__all__ = ["KVCache"]

# Seconds before a cache tries again to open its step channel, after a failure
# that may pass.
_CHANNEL_RETRY = 1.0


class KVCache:
    """The server-side KV cache of a batch of sequences, one session each.

    client: an attnserve.Client, or a target ("host:port") for which the cache
        opens a Client of its own (closed with the cache).
    num_layers, num_kv_heads, head_dim, value_dim (0 = head_dim), storage_dtype
        ("float32", "bfloat16", "float16"): the shape of every session.
    window_tokens, sink_tokens: window_tokens > 0 makes every session a sink +
        window session (StreamingLLM: each layer keeps its first sink_tokens
        tokens and its last window_tokens, at flat memory); a layer call then
        equals SDPA over the whole sequence with query i seeing the keys in
        [i - window_tokens + 1, i] and the first sink_tokens.
    batch_size: the number of sequences; None = the batch of the first call.
    prefill_chunk: at most this many new tokens per sequence go in one call; a
        longer prefill is sent in chunks, each one call for the whole batch (and
        smaller chunks when a call would pass the server's max_message_bytes).
    transport: what makes the layer calls: any object with the method
        attend_sessions(layer, parts, **kw) of attnserve.Client; None (default)
        = the client, or the step channel below. cache.transport is the one in
        use.
    step_channel: whether the layer calls go through a TCP step channel that
        the cache opens at its first call (client.step_channel(tcp=True,
        same_host=True), closed with the cache). None (default): when the
        client's target is a loopback address and the server, on this host,
        offers one; if it cannot be opened, the client's calls, and the reason
        is cache.step_channel_error (tried again a second later, unless the
        server refused it for good: FailedPrecondition, Unimplemented). True:
        always (its error is raised). False: never. Not with a transport.
    scale, softcap, relative_bias, output_dtype, timeout: passed to every layer
        call (scale default 1/sqrt(head_dim); softcap, Gemma 2's logit
        soft-capping, default none; relative_bias, an attnserve.RelativeBias of
        T5's decoder self-attention (bidirectional=False; T5 computes it in its
        first layer and adds it in every layer, and scales no scores: scale=1.0),
        default none; output_dtype default the query's dtype). Attention sinks,
        which differ per layer, are an argument of attend.
    session_prefix: the sessions are named "<prefix>-<n>"; default a random one.
        It is also their routing key, so that every sequence of the batch lives
        on the same replica behind a load balancer.
    ttl: the sessions' idle time-out in seconds (None = the server's default).
    on_lost: None (default), or on_lost(index, tokens) -> [(k, v) per layer],
        k [Hkv, >= n, D] and v [Hkv, >= n, Dv] (SDPA's layout for one sequence)
        holding at least the first n tokens of each layer, n <= tokens. When a
        layer call finds sessions gone from the server (NotFound: the replica
        was restarted, killed or replaced, or the session expired), the cache
        asks it for the lost sequences' keys and values, creates their sessions
        again with the first n tokens of each layer (n as the cache counted
        them), and retries the call once. Without it the NotFound is raised.
    handoff_wait: seconds (default 30) for which a layer call refused with
        Unavailable is tried again (every 10 ms, backing off to 200 ms): a
        replica that drains refuses calls before applying them, and when it
        hands its sessions to a peer (the server's --handoff_to) the retries,
        routed there by the load balancer, find them; 0 = raise at once.

    Sequences are numbered 0 .. batch_size - 1 in the order of the batch
    dimension. The cache is not thread-safe: use it from one thread.
    """

    def __init__(self, client, *, num_layers, num_kv_heads, head_dim, value_dim=0,
                 storage_dtype="float32", window_tokens=0, sink_tokens=0,
                 batch_size=None, prefill_chunk=512,
                 transport=None, scale=None, softcap=None, relative_bias=None,
                 output_dtype=None, timeout=None, session_prefix=None, ttl=None, on_lost=None,
                 handoff_wait=30.0, step_channel=None):
        if relative_bias is not None:  # its message, checked and built once for every call
            relative_bias = relative_bias_message(relative_bias, "relative_bias")
        if isinstance(client, str):
            client = Client(client)
            self._own_client = True
        else:
            self._own_client = False
        self.client = client
        if transport is not None and not callable(getattr(transport, "attend_sessions", None)):
            raise TypeError("transport: expected an object with an attend_sessions(layer, "
                            f"parts, **kw) method, got {type(transport).__name__}")
        if step_channel not in (None, True, False):
            raise TypeError(f"step_channel: expected None, True or False, got {step_channel!r}")
        if step_channel and transport is not None:
            raise ValueError("step_channel=True and a transport: the cache opens its step "
                             "channel only when it makes the layer calls itself")
        if step_channel and not isinstance(client, Client):
            raise TypeError(f"step_channel=True: expected an attnserve.Client, got "
                            f"{type(client).__name__}")
        if step_channel is None and (transport is not None or not isinstance(client, Client)
                                     or not is_loopback(target_host(client.target))):
            step_channel = False  # the default opens one only to this host, for itself
        self._step_channel = step_channel
        self._channel = None            # the step channel the cache opened
        self.step_channel_error = None  # why the default step channel could not be opened
        self._channel_retry_at = None   # when to try again; None = not again
        self.num_layers = _positive("num_layers", num_layers)
        self.num_kv_heads = _positive("num_kv_heads", num_kv_heads)
        self.head_dim = _positive("head_dim", head_dim)
        self.value_dim = int(value_dim) or self.head_dim
        self.storage_dtype = storage_dtype
        self.window_tokens = int(window_tokens)
        self.sink_tokens = int(sink_tokens)
        self.prefill_chunk = _positive("prefill_chunk", prefill_chunk)
        self.ttl = ttl
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost: expected a callable, got {type(on_lost).__name__}")
        self.on_lost = on_lost
        self.recovered = 0      # sequences created again through on_lost
        if not handoff_wait >= 0:
            raise ValueError(f"handoff_wait: expected seconds >= 0, got {handoff_wait!r}")
        self.handoff_wait = float(handoff_wait)
        self.retried = 0        # layer calls tried again after Unavailable
        self.session_prefix = session_prefix or f"kv-{uuid.uuid4().hex[:16]}"
        self._counter = itertools.count()
        self._step_kw = {"causal": True}
        for name, value in (("scale", scale), ("softcap", softcap),
                            ("relative_bias", relative_bias),
                            ("output_dtype", output_dtype), ("timeout", timeout)):
            if value is not None:
                self._step_kw[name] = value
        self._use(client if transport is None else transport)
        self._sessions = []     # per sequence: a Session, or None before its first use
        self._lengths = []      # per sequence: the tokens each layer holds
        self._batch_size = None
        if batch_size is not None:
            self._new_batch(_positive("batch_size", batch_size))

    # -- the batch ----------------------------------------------------------------
    @property
    def batch_size(self):
        """The number of sequences (None before the first call without batch_size)."""
        return self._batch_size

    @property
    def sessions(self):
        """The sequences' Sessions (None for a sequence not yet used), in batch order."""
        return list(self._sessions)

    def lengths(self, layer=0):
        """The tokens that `layer` holds for each sequence."""
        return [n[layer] for n in self._lengths]

    def __len__(self):
        return self._batch_size or 0

    def __repr__(self):
        return (f"KVCache(batch_size={self._batch_size}, num_layers={self.num_layers}, "
                f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
                f"lengths={self.lengths() if self._lengths else []})")

    def _chunk_tokens(self, b, hq, element_bytes, appends):
        """prefill_chunk, or fewer tokens when a call of that many would pass the
        server's one-message limit (max_message_bytes)."""
        if self.client.limits is None:
            self.client._open()  # the server's limits, before its first call
        limit = self.client.limits.max_message_bytes
        if not limit:
            return self.prefill_chunk
        row = hq * self.head_dim
        if appends:
            row += self.num_kv_heads * (self.head_dim + self.value_dim)
        room = limit - RESPONSE_ENVELOPE_BYTES - 512 * b  # the fields around the tensors
        return max(1, min(self.prefill_chunk, room // (b * row * element_bytes)))

    def _new_batch(self, batch_size):
        self._batch_size = batch_size
        self._sessions = [None] * batch_size
        self._lengths = [[0] * self.num_layers for _ in range(batch_size)]

    def _new_id(self):
        return f"{self.session_prefix}-{next(self._counter)}"

    def _session(self, index):
        s = self._sessions[index]
        if s is None:
            s = self.client.create_session(
                self._new_id(), num_layers=self.num_layers, num_kv_heads=self.num_kv_heads,
                head_dim=self.head_dim, value_dim=self.value_dim,
                storage_dtype=self.storage_dtype, window_tokens=self.window_tokens,
                sink_tokens=self.sink_tokens,
                max_tokens=(1 << 40) if self.window_tokens else (1 << 24), ttl=self.ttl,
                route_key=self.session_prefix, timeout=self._step_kw.get("timeout"))
            self._sessions[index] = s
        return s

    # -- a layer ------------------------------------------------------------------
    def attend(self, layer, q, k=None, v=None, *, sinks=None):
        """Appends the new keys and values of every sequence to `layer` and returns
        the attention of the new queries over each sequence's tokens.

        q [B, Hq, T, D], k [B, Hkv, T, D], v [B, Hkv, T, Dv] (torch's SDPA layout,
        new tokens only; any float dtype, any device). Returns [B, Hq, T, Dv] on q's
        device: query i of the T new tokens sees the sequence's keys up to its own
        position (causal, bottom-right), as SDPA with is_causal over the whole cache
        would. The result is a transposed view of a [B, T, Hq, Dv] tensor, so that
        `out.transpose(1, 2).reshape(B, T, Hq * Dv)` needs no copy.

        k and v None attend without appending (the T queries are then the layer's
        last T positions). One call per layer for the whole batch; a prefill of more
        than prefill_chunk tokens is one call per chunk.

        sinks: None, or the layer's Hq attention-sink logits (gpt-oss: a list, array
        or tensor such as the layer's nn.Parameter): each softmax of head h gets one
        more term exp(sinks[h]) in its denominator.
        """
        layer = int(layer)
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer: {layer} is not in 0 .. {self.num_layers - 1}")
        if (k is None) != (v is None):
            raise ValueError("k, v: give both new keys and values, or neither")
        if q.dim() != 4:
            raise ValueError(f"q: expected [B, Hq, T, D], got {list(q.shape)}")
        b, hq, t, d = (int(x) for x in q.shape)
        if self._batch_size is None:
            self._new_batch(b)
        if b != self._batch_size:
            raise ValueError(f"q: batch {b}, the cache holds {self._batch_size} sequences "
                             "(reset(), fork() and fork_all() change the batch)")
        if d != self.head_dim:
            raise ValueError(f"q: head_dim {d}, the cache's is {self.head_dim}")
        if hq % self.num_kv_heads:
            raise ValueError(f"q: {hq} heads is not a multiple of num_kv_heads "
                             f"{self.num_kv_heads}")
        if t < 1:
            raise ValueError("q: no new tokens (T = 0)")
        if k is not None:
            want_k = [b, self.num_kv_heads, t, self.head_dim]
            want_v = [b, self.num_kv_heads, t, self.value_dim]
            if list(k.shape) != want_k:
                raise ValueError(f"k: expected {want_k}, got {list(k.shape)}")
            if list(v.shape) != want_v:
                raise ValueError(f"v: expected {want_v}, got {list(v.shape)}")
        if not self._batch_size:
            return q.new_empty((0, hq, t, self.value_dim))
        # The session layout [T, H, D]: one transpose (a copy) for the whole batch,
        # after which every sequence's tokens, and every chunk of them, are contiguous.
        qs = q.detach().transpose(1, 2).contiguous()
        ks = None if k is None else k.detach().transpose(1, 2).contiguous()
        vs = None if v is None else v.detach().transpose(1, 2).contiguous()
        outs = []
        chunk = self._chunk_tokens(b, hq, max(x.element_size() for x in (q, k, v)
                                              if x is not None), k is not None)
        for start in range(0, t, chunk):
            stop = min(t, start + chunk)
            step = (qs, ks, vs) if stop - start == t else (
                qs[:, start:stop], None if ks is None else ks[:, start:stop],
                None if vs is None else vs[:, start:stop])
            try:
                try:
                    out = self._step_retrying(layer, step, sinks)
                except NotFound:
                    if self.on_lost is None or not self._recover():
                        raise
                    out = self._step_retrying(layer, step, sinks)
            except Exception:
                if ks is not None:
                    self._resync(layer)
                raise
            if ks is not None:
                for i in range(b):
                    self._lengths[i][layer] += stop - start
            outs.append(out)  # [B, chunk, Hq, Dv]
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
        if out.device != q.device:
            out = out.to(q.device)
        return out.transpose(1, 2)

    __call__ = attend

    def _step_retrying(self, layer, step, sinks):
        """One layer call, tried again while it is refused with Unavailable
        (for at most handoff_wait seconds), unless the server kept its appends
        (it failed after them: trying again would append the tokens twice)."""
        give_up = time.monotonic() + self.handoff_wait
        delay = 0.01
        appends = step[1] is not None  # step: (q, k, v), k None without appends
        while True:
            try:
                return self._step(layer, *step, sinks)
            except Unavailable:
                if time.monotonic() + delay > give_up or (appends and self._kept(layer)):
                    raise
                self.retried += 1
                time.sleep(delay)
                delay = min(2 * delay, 0.2)

    def _kept(self, layer):
        """Whether the server holds more tokens of `layer` than the cache
        counted (a call that failed after its appends). The sessions of the
        batch live on one server: a server that cannot be asked (draining,
        gone, or the sessions moving) refused the call before appending."""
        for i, s in enumerate(self._sessions):
            if s is None:
                continue
            try:
                held = s.info(timeout=1.0).layer_tokens[layer]
            except Exception:
                return False
            if held != self._lengths[i][layer]:
                return True
        return False

    def _resync(self, layer):
        """After a failed call with new keys: the tokens each session's layer
        holds, as the server says (a call that failed after its appends, on a
        full queue or its deadline, kept them), so that the next call's
        positions follow them. Best effort: a session that cannot be asked keeps
        the count it had."""
        for i, s in enumerate(self._sessions):
            if s is None:
                continue
            try:
                self._lengths[i][layer] = s.info().layer_tokens[layer]
            except Exception:  # the call's own error is the one to report
                pass

    def _recover(self):
        """The sequences whose sessions the server no longer has, created again
        through on_lost with the tokens the cache counted; True when there were
        any."""
        timeout = self._step_kw.get("timeout")
        lost = []
        for i, s in enumerate(self._sessions):
            if s is None:
                continue
            try:
                s.info(timeout=timeout)
            except NotFound:
                lost.append(i)
        for i in lost:
            counts = self._lengths[i]
            layers = list(self.on_lost(i, max(counts)))
            if len(layers) != self.num_layers:
                raise ValueError(f"on_lost: returned {len(layers)} layers, the cache has "
                                 f"{self.num_layers}")
            self._sessions[i] = None
            s = self._session(i)
            for layer, ((k, v), n) in enumerate(zip(layers, counts)):
                if n == 0:
                    continue
                k, v = torch.as_tensor(k), torch.as_tensor(v)
                if k.shape[1] < n or v.shape[1] < n:
                    raise ValueError(f"on_lost: layer {layer} of sequence {i} holds "
                                     f"{min(k.shape[1], v.shape[1])} tokens, the cache "
                                     f"had {n}")
                s.append(layer, k[:, :n].transpose(0, 1), v[:, :n].transpose(0, 1),
                         position=0, chunk_tokens=self.prefill_chunk, timeout=timeout)
            self.recovered += 1
        return bool(lost)

    def _use(self, transport):
        """Makes the layer calls through `transport`. A step channel takes a
        step's bytes: they are written directly (StepCodec)."""
        self.transport = transport
        self._codec = None
        step_bytes = getattr(transport, "step_bytes", None)
        if callable(step_bytes) and not inspect.iscoroutinefunction(step_bytes):
            self._codec = StepCodec(**{name: value for name, value in self._step_kw.items()
                                       if name != "timeout"})

    def _open_channel(self):
        """Opens the cache's step channel when it should have one and has none."""
        if self._channel is not None or self._step_channel is False:
            return
        if self._step_channel is None and self.step_channel_error is not None and (
                self._channel_retry_at is None or time.monotonic() < self._channel_retry_at):
            return
        try:
            self._channel = self.client.step_channel(tcp=True, same_host=True,
                                                     route_key=self.session_prefix)
        except Error as e:
            if self._step_channel:
                raise
            # A server draining, all its channels taken, a port not reached:
            # maybe not for long. Off, or another host: for good.
            self.step_channel_error = e
            self._channel_retry_at = (
                None if isinstance(e, (FailedPrecondition, Unimplemented))
                else time.monotonic() + _CHANNEL_RETRY)
            return
        self.step_channel_error = None
        self._use(self._channel)

    def _close_channel(self):
        channel, self._channel = self._channel, None
        if channel is not None:
            self._use(self.client)
            channel.close()

    def _step(self, layer, q, k, v, sinks):
        """One call for the whole batch: q [B, T, Hq, D], k and v [B, T, Hkv, D]
        (or None: no appends), each sequence's rows contiguous; returns the
        outputs [B, T, Hq, Dv]. A step channel the cache opened that has ended
        (the server drained) is let go of, and another opened."""
        if self._channel is not None and self._channel.closed:
            self._close_channel()
        self._open_channel()
        return self._step_through(layer, q, k, v, sinks)

    def _step_through(self, layer, q, k, v, sinks):
        """_step through self.transport; the request's bytes are written
        directly (StepCodec) when it takes them and the tensors allow it."""
        sessions = [self._session(i) for i in range(len(q))]
        positions = None if k is None else [n[layer] for n in self._lengths]
        if self._codec is not None and self._codec.takes(q, k, v):
            request = self._codec.request(layer, [s.session_id for s in sessions], q, k, v,
                                          positions, sinks)
            return self._codec.outputs(self.transport.step_bytes(request), len(sessions),
                                       (q.shape[1], q.shape[2], self.value_dim))
        if k is None:
            parts = [(s, q[i]) for i, s in enumerate(sessions)]
        else:
            parts = [(s, q[i], k[i], v[i], positions[i]) for i, s in enumerate(sessions)]
        kw = self._step_kw if sinks is None else dict(self._step_kw, sinks=sinks)
        results = self.transport.attend_sessions(layer, parts, **kw)
        return torch.stack([torch.as_tensor(r) for r in results])

    # -- beams, speculation, the end ------------------------------------------------
    def fork(self, index):
        """Adds a copy of sequence `index` at the end of the batch (its session forked
        on the server: every block shared copy-on-write) and returns its index."""
        index = self._index(index)
        parent = self._sessions[index]
        self._sessions.append(None if parent is None else parent.fork(self._new_id()))
        self._lengths.append(list(self._lengths[index]))
        self._batch_size += 1
        return self._batch_size - 1

    def fork_all(self, parents):
        """Makes a new batch from the current one: sequence i of the new batch
        continues sequence parents[i] of the old one (beam search's reordering).

        A sequence named once keeps its session; one named n times keeps it for its
        first place and is forked for the others; a sequence not named is closed.
        fork_all([0] * 4) turns one prompt into four beams. Returns the new batch size.
        """
        parents = [self._index(p) for p in parents]
        kept = set()
        sessions, lengths = [], []
        for p in parents:
            s = self._sessions[p]
            if p in kept and s is not None:
                s = s.fork(self._new_id())
            kept.add(p)
            sessions.append(s)
            lengths.append(list(self._lengths[p]))
        for i, s in enumerate(self._sessions):
            if i not in kept and s is not None:
                _close(s)
        self._sessions, self._lengths = sessions, lengths
        self._batch_size = len(sessions)
        return self._batch_size

    def truncate(self, tokens, index=None):
        """Keeps the first `tokens` tokens of every layer (dropping rejected
        speculative tokens, or rewinding).

        tokens: one count for every sequence, or a list of one count per sequence;
        with index, only that sequence is truncated. A sequence already no longer
        than its count is left alone (no call).
        """
        if index is not None:
            targets = {self._index(index): tokens}
        elif isinstance(tokens, numbers.Integral) or (
                torch.is_tensor(tokens) and tokens.dim() == 0):
            targets = {i: tokens for i in range(len(self))}
        else:
            tokens = list(tokens)
            if len(tokens) != len(self):
                raise ValueError(f"tokens: {len(tokens)} counts for {len(self)} sequences")
            targets = dict(enumerate(tokens))
        for i, n in targets.items():
            n = int(n)
            if n < 0:
                raise ValueError(f"tokens: {n} is negative")
            if n >= max(self._lengths[i]):
                continue
            if self._sessions[i] is not None:
                self._sessions[i].truncate(n, timeout=self._step_kw.get("timeout"))
            self._lengths[i] = [min(x, n) for x in self._lengths[i]]

    def reset(self, batch_size=None):
        """Closes every session and starts a new batch (of batch_size sequences, or
        of the batch of the next call)."""
        self._close_sessions()
        self._batch_size = None
        self._sessions, self._lengths = [], []
        if batch_size is not None:
            self._new_batch(_positive("batch_size", batch_size))

    def close(self):
        """Closes every session (a session that has already ended is skipped). The
        cache may be used again: the next call starts a new batch. A client that the
        cache opened from a target is closed too, and so is its step channel."""
        try:
            self.reset()
        finally:
            self._close_channel()
            self.step_channel_error = self._channel_retry_at = None
            if self._own_client:
                self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _close_sessions(self):
        sessions = [s for s in self._sessions if s is not None]
        self._sessions = [None] * len(self._sessions)
        first_error = None
        for s in sessions:
            try:
                _close(s)
            except Exception as e:  # close the others first, then report
                first_error = first_error or e
        if first_error is not None:
            raise first_error

    def _index(self, index):
        i = int(index)
        if not 0 <= i < len(self):
            raise IndexError(f"sequence {i} is not in the batch of {len(self)}")
        return i


def _close(session):
    try:
        session.close()
    except NotFound:  # expired, evicted or closed already: nothing to free
        pass


def _positive(name, value):
    v = int(value)
    if v < 1:
        raise ValueError(f"{name}: must be >= 1, got {value}")
    return v
