#ifndef ATTNSERVE_WIRE_V2_PARAMETERS_H_
#define ATTNSERVE_WIRE_V2_PARAMETERS_H_

// Names of Open Inference Protocol (KServe v2) parameters that both the
// server (server/kserve/) and attnctl (client/v2_messages.cc) use: Triton's
// shared-memory parameters of an input or a requested output, and the native
// Timing that a ModelInferResponse carries (docs/api.md).

namespace attnserve::wire {

// Triton's system shared-memory extension: a tensor in a registered region.
inline constexpr char kV2SharedMemoryRegion[] = "shared_memory_region";
inline constexpr char kV2SharedMemoryOffset[] = "shared_memory_offset";
inline constexpr char kV2SharedMemoryByteSize[] = "shared_memory_byte_size";

// The response's timing (int64_param each).
inline constexpr char kV2TimingQueueUs[] = "timing.queue_us";
inline constexpr char kV2TimingComputeUs[] = "timing.compute_us";
inline constexpr char kV2TimingTotalUs[] = "timing.total_us";
inline constexpr char kV2TimingFlops[] = "timing.flops";

}  // namespace attnserve::wire

#endif  // ATTNSERVE_WIRE_V2_PARAMETERS_H_
