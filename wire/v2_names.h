#ifndef ATTNSERVE_WIRE_V2_NAMES_H_
#define ATTNSERVE_WIRE_V2_NAMES_H_

// The names of the Open Inference Protocol (KServe v2) mapping that both the
// server (server/kserve/) and attnctl (client/v2_messages.cc,
// client/infer.cc) spell: the native Attend's model, the tensors' names, the
// request parameters, Triton's shared-memory parameters of an input or a
// requested output, and the native Timing that a ModelInferResponse carries
// (docs/api.md).

namespace attnserve::wire {

// The model that is the native Attend call.
inline constexpr char kV2AttentionModel[] = "attention";

// Inputs of model "attention".
inline constexpr char kV2Query[] = "query";
inline constexpr char kV2Key[] = "key";
inline constexpr char kV2Value[] = "value";
inline constexpr char kV2Sinks[] = "sinks";
// Inputs of a hosted model.
inline constexpr char kV2Hidden[] = "hidden";
inline constexpr char kV2Memory[] = "memory";
inline constexpr char kV2Positions[] = "positions";
// Mask inputs of every model.
inline constexpr char kV2Mask[] = "mask";
inline constexpr char kV2KeyLengths[] = "key_lengths";
inline constexpr char kV2AlibiSlopes[] = "alibi_slopes";
// Outputs of every model.
inline constexpr char kV2Output[] = "output";
inline constexpr char kV2Weights[] = "weights";
// Outputs of model "attention" (AttendResponse.entropy, max_weight).
inline constexpr char kV2Entropy[] = "entropy";
inline constexpr char kV2MaxWeight[] = "max_weight";

// Request parameters (the model's list in server/kserve/infer_codec.cc says
// which model takes which).
inline constexpr char kV2Causal[] = "causal";
inline constexpr char kV2Alignment[] = "alignment";
inline constexpr char kV2WindowLeft[] = "window_left";
inline constexpr char kV2WindowRight[] = "window_right";
inline constexpr char kV2SinkTokens[] = "sink_tokens";
inline constexpr char kV2Scale[] = "scale";
inline constexpr char kV2Softcap[] = "softcap";
inline constexpr char kV2Layout[] = "layout";
inline constexpr char kV2ReturnWeights[] = "return_weights";
inline constexpr char kV2ReturnWeightStats[] = "return_weight_stats";
inline constexpr char kV2OutputDatatype[] = "output_datatype";

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

#endif  // ATTNSERVE_WIRE_V2_NAMES_H_
