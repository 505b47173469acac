"""One exception class per gRPC status code, all under attnserve.Error.

The server's status message is the exception's message (``str(e)`` and
``e.message``); ``e.code`` is the ``grpc.StatusCode``. Checks the client makes
before sending raise the same classes with the server's wording, so a caller
handles a bad shape the same way whichever side found it.
"""

import grpc


class Error(Exception):
    """Base of every error attnserve's client raises for a failed call."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message, *, debug=None):
        super().__init__(message)
        self.message = message
        # gRPC's debug string (the peer, the transport's view), when there is one.
        self.debug = debug


class Cancelled(Error):
    code = grpc.StatusCode.CANCELLED


class Unknown(Error):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(Error, ValueError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(Error, TimeoutError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(Error, LookupError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(Error):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(Error):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(Error):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(Error):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(Error):
    code = grpc.StatusCode.ABORTED


class OutOfRange(Error, ValueError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(Error, NotImplementedError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(Error):
    code = grpc.StatusCode.INTERNAL


class Unavailable(Error, ConnectionError):
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(Error):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(Error):
    code = grpc.StatusCode.UNAUTHENTICATED


ERROR_CLASSES = {cls.code: cls for cls in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
    PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
    Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)}
_BY_NUMBER = {code.value[0]: cls for code, cls in ERROR_CLASSES.items()}


def error_for_code(code, message):
    """The Error for a grpc.StatusCode or its number (AttendResponse.error_code)."""
    if isinstance(code, grpc.StatusCode):
        cls = ERROR_CLASSES.get(code, Unknown)
    else:
        cls = _BY_NUMBER.get(int(code), Unknown)
    return cls(message)


def from_rpc_error(e):
    """The Error for a grpc.RpcError (sync or aio)."""
    code = e.code() if callable(getattr(e, "code", None)) else grpc.StatusCode.UNKNOWN
    details = e.details() if callable(getattr(e, "details", None)) else str(e)
    err = error_for_code(code, details or "")
    debug = getattr(e, "debug_error_string", None)
    err.debug = debug() if callable(debug) else None
    return err
