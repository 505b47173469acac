"""attnserve: remote scaled dot-product attention from NumPy and PyTorch.

    import attnserve
    with attnserve.Client("localhost:50051") as client:
        out = client.attend(q, k, v, is_causal=True)

docs/python.md has the whole API with a worked example.
"""

from .aio import AsyncClient, AsyncModel, AsyncSession, AsyncSharedMemoryRegion
from ._shared_memory import SharedTensor
from .client import Client, Model, Session, SharedMemoryRegion, StepChannel
from .errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, Error,
                     FailedPrecondition, Internal, InvalidArgument, NotFound, OutOfRange,
                     PermissionDenied, ResourceExhausted, Unauthenticated, Unavailable,
                     Unimplemented, Unknown)
from .plot import plot_entropy, plot_weights
from .types import (BlockSparse, LinearAttention, LshAttention, ModelInfo, RelativeBias,
                    RelativeKeys, ServerInfo, SessionInfo, SessionLimits, SessionShape,
                    SharedMemoryRegionInfo, SharedMemoryStatus, WeightStats)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "AsyncModel", "AsyncSession", "Client", "Model", "Session",
    "SharedMemoryRegion", "AsyncSharedMemoryRegion", "SharedTensor", "StepChannel",
    "Error", "Aborted", "AlreadyExists", "Cancelled", "DataLoss", "DeadlineExceeded",
    "FailedPrecondition", "Internal", "InvalidArgument", "NotFound", "OutOfRange",
    "PermissionDenied", "ResourceExhausted", "Unauthenticated", "Unavailable",
    "Unimplemented", "Unknown", "plot_entropy", "plot_weights", "BlockSparse", "LinearAttention",
    "LshAttention", "ModelInfo", "RelativeBias", "RelativeKeys", "ServerInfo", "SessionInfo",
    "SessionLimits", "SessionShape", "SharedMemoryRegionInfo", "SharedMemoryStatus",
    "WeightStats",
]
