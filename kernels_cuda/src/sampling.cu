// fib-runtime sampling family: tvm-ffi bindings and launch logic.
// Exported functions (see fib_runtime/kernels/sampling.py for the Python API):
//   sample(...)            -> int64 the kernel used: S (cluster kernel, S CTAs per row), -1
//                             (streaming kernel), 1000 + S (filter kernel) or 2000 + C (split
//                             kernel, C chunks per row); one launch, no host sync; no allocation
//                             but the split kernel's workspace (per device and stream, grown on
//                             demand, also during graph capture)
//   current_stream(t)      -> int64 the stream tvm-ffi hands this library for t's device
//   launch_config(B, V, dtype_code, cluster, device) -> "S,chunk,resident,smem,sms,major,kind"
//   prof_read()            -> the filter kernel's phase times (profiling builds only)
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/string.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <string>

#include "fib/sampling/filter.cuh"
#include "fib/sampling/split.cuh"
#include "fib/sampling/stream.cuh"

#include <cstdlib>

using tvm::ffi::Optional;
using tvm::ffi::TensorView;
namespace fs = fib::sampling;

namespace {

struct DevInfo {
  int sms = 0, major = 0, optin = 0;
  int static_smem[3] = {0, 0, 0};
  double filter_min_tokens = 6.0e6;  // FIB_SAMPLING_FILTER_MIN_TOKENS
  // kernels whose shared memory fits this device: the streaming kernel (96 KB dynamic + its static
  // share: more than the 99 KB a block may have on sm_86/89) and the split kernel's dynamic size
  // (kStreamSmem where it fits, for stream_row; kSplitSmem; 0: unavailable)
  bool stream_ok = true;
  int split_smem = 0;
  int stream_min_b = 96;  // run-4 sweep: streaming wins from B=128 (78 vs 93 us), loses at B=64  // FIB_SAMPLING_STREAM_MIN_B: batches from this size use the streaming kernel
};
using fs::kStreamSmem;
constexpr int kMaxDev = 64;
DevInfo g_dev[kMaxDev];
std::atomic<bool> g_ready[kMaxDev];
std::mutex g_mu;

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    TVM_FFI_THROW(RuntimeError) << "fib sampling: " << what << ": " << cudaGetErrorString(e);
  }
}

template <int DT>
void prepare_kernel(DevInfo& d) {
  cudaFuncAttributes a;
  check_cuda(cudaFuncGetAttributes(&a, fs::sampler_kernel<DT>), "cudaFuncGetAttributes");
  d.static_smem[DT] = static_cast<int>(a.sharedSizeBytes);
  check_cuda(cudaFuncSetAttribute(fs::sampler_kernel<DT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  d.optin - static_cast<int>(a.sharedSizeBytes)),
             "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  if (d.major >= 9) {
    check_cuda(cudaFuncSetAttribute(fs::sampler_kernel<DT>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
               "cudaFuncSetAttribute(NonPortableClusterSizeAllowed)");
  }
  check_cuda(cudaFuncGetAttributes(&a, fs::stream_kernel<DT>), "cudaFuncGetAttributes(stream)");
  if (d.optin >= static_cast<int>(a.sharedSizeBytes + kStreamSmem)) {
    check_cuda(cudaFuncSetAttribute(fs::stream_kernel<DT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(kStreamSmem)),
               "cudaFuncSetAttribute(stream MaxDynamicSharedMemorySize)");
  } else {
    d.stream_ok = false;
  }
  check_cuda(cudaFuncGetAttributes(&a, fs::split_kernel<DT>), "cudaFuncGetAttributes(split)");
  const int st = static_cast<int>(a.sharedSizeBytes);
  const int want = d.optin >= st + static_cast<int>(kStreamSmem)         ? static_cast<int>(kStreamSmem)
                   : d.optin >= st + static_cast<int>(fs::kSplitSmem) ? static_cast<int>(fs::kSplitSmem)
                                                                         : 0;
  if (want > 0) {
    check_cuda(cudaFuncSetAttribute(fs::split_kernel<DT>, cudaFuncAttributeMaxDynamicSharedMemorySize, want),
               "cudaFuncSetAttribute(split MaxDynamicSharedMemorySize)");
  }
  d.split_smem = DT == fs::kF32 ? want : (want < d.split_smem ? want : d.split_smem);  // (kF32 prepared first)
  if (d.major >= 9) {
    check_cuda(cudaFuncSetAttribute(fs::filter_kernel<DT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(fs::kFilterSmem)),
               "cudaFuncSetAttribute(filter MaxDynamicSharedMemorySize)");
  }
}

const DevInfo& dev_info(int dev) {
  if (dev < 0 || dev >= kMaxDev) TVM_FFI_THROW(ValueError) << "fib sampling: device id " << dev << " out of range";
  if (g_ready[dev].load(std::memory_order_acquire)) return g_dev[dev];
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_ready[dev].load(std::memory_order_relaxed)) {
    DevInfo& d = g_dev[dev];
    check_cuda(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev), "device attribute");
    check_cuda(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, dev), "device attribute");
    check_cuda(cudaDeviceGetAttribute(&d.optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "device attribute");
    if (const char* e = std::getenv("FIB_SAMPLING_STREAM_MIN_B")) d.stream_min_b = std::atoi(e);
    if (const char* e = std::getenv("FIB_SAMPLING_FILTER_MIN_TOKENS")) d.filter_min_tokens = std::atof(e);
    prepare_kernel<fs::kF32>(d);
    prepare_kernel<fs::kBF16>(d);
    prepare_kernel<fs::kF16>(d);
    g_ready[dev].store(true, std::memory_order_release);
  }
  return g_dev[dev];
}

int dtype_code(DLDataType t) {
  if (t.lanes != 1) return -1;
  if (t.code == kDLFloat && t.bits == 32) return fs::kF32;
  if (t.code == kDLBfloat && t.bits == 16) return fs::kBF16;
  if (t.code == kDLFloat && t.bits == 16) return fs::kF16;
  return -1;
}

struct Config {
  int S, chunk, resident, hist_bytes;
  size_t smem;
};

constexpr int kHistBytes = 2 * fs::kHistBufBytes;

// needs_hist: top-k or top-p present (radix histograms / candidate lists in shared memory); without
// them (plain sampling, min-p) the slice alone is resident and smaller slices give 2 CTAs per SM.
Config choose_config(const DevInfo& d, int B, int V, int dt, int cluster, bool needs_hist = true,
                     bool topk_sampling = false) {
  Config c;
  const int hist_bytes = needs_hist ? kHistBytes : 0;
  int S;
  if (d.major < 9) {
    S = 1;
  } else if (cluster > 0) {
    S = cluster;
  } else {
    // slices of at most 32K keys (128 KB, resident), enough CTAs to cover ~2 per SM at small B,
    // no slice below 4K keys. Measured on the H200 (run 1 sweep): 4 CTAs per row beat 6-8 at
    // V=128256 for B=1..512.
    // without histograms, slices of up to 27000 keys (105 KB: still 2 CTAs per SM; H200, B=512
    // V=128256: S=5 180 us plain, 254 top-p, against S=6 190 and 271)
    const int s_min = needs_hist ? (V + 32767) / 32768 : (V + 26999) / 27000;
    const int s_fill = (2 * d.sms + B - 1) / B;
    const int s_use = (V + 4095) / 4096;
    int s_want = s_fill < s_use ? s_fill : s_use;
    // clusters of 8 at one CTA per SM do not all fit in one wave (GPC capacity): measured B=16,
    // V=128256: S=8 33.6 us, S=6 22.2 us; at B=1 S=8 is still best (20.6 vs 21.5 us)
    if (B >= 8 && s_want > 6) s_want = 6;
    S = s_min > s_want ? s_min : s_want;
    // top-k sampling at 48 <= B < the streaming threshold: the run-4 sweep (logits, k=50) measured
    // V=128256 B=64: S=3 48.2 us (slices streamed from L2) < S=4 57.8 < S=5 61.8 < streaming 76.5;
    // V=32000 B=64: S=2 19.7 < S=5 29.8; V=151936 B=64: S=4 66.4 < S=5 66.8 < streaming 82.2
    if (topk_sampling && B >= 48) S = V > 140000 ? 4 : (V > 65536 ? 3 : 2);
  }
  if (S > fs::kMaxCluster) S = fs::kMaxCluster;
  if (S < 1) S = 1;
  int chunk = (V + S - 1) / S;
  chunk = (chunk + 7) & ~7;
  const int avail = d.optin - d.static_smem[dt] - hist_bytes;
  c.resident = static_cast<int64_t>(chunk) * 4 <= avail ? 1 : 0;
  c.S = S;
  c.chunk = chunk;
  c.hist_bytes = c.resident ? hist_bytes : kHistBytes;  // streamed rows keep the full layout
  c.smem = c.hist_bytes + (c.resident ? static_cast<size_t>(chunk) * 4 : 0);
  return c;
}

// Which kernel runs a call. `cluster` (FIB_SAMPLING_CLUSTER / the cluster argument) is a knob for
// benchmarks: 0 automatic; 1..8 the resident-row cluster kernel with that many CTAs per row; -1 the
// streaming kernel; 999 the policy before the filter kernel (cluster kernel, streaming from
// FIB_SAMPLING_STREAM_MIN_B rows); 1000 + S the one-pass filter kernel with S CTAs per row (1000:
// automatic S); 2000 the split kernel (split.cuh; the policy before sm_90 at small batches).
enum Kind : int { kCluster = 0, kStream = 1, kFilter = 2, kSplit = 3 };
Kind kernel_kind(const DevInfo& d, const fs::Params& p, int cluster, bool allow_split = true) {
  if (p.mode != fs::kSample || !p.has_topk) return kCluster;
  const bool split_ok = allow_split && d.split_smem > 0;
  if (cluster == 2000 && split_ok) return kSplit;  // forced (any architecture)
  // sm_86/89: the streaming kernel does not fit; the split kernel (its large-k rows through
  // sample_row), else the general algorithm in the cluster kernel (S = 1)
  if (!d.stream_ok) return split_ok ? kSplit : kCluster;
  // before sm_90 the streaming kernel (one CTA per row) is the only other top-k path: the split
  // kernel (C CTAs per row) takes the batches whose rows do not fill the GPU when every row is
  // known to be its own (a scalar top_k <= kSplitMaxK, no greedy row): its other rows run the
  // streaming kernel's row code in one CTA of a grid not laid out for them, up to 1.5x slower.
  // Measured on the H200 against the streaming kernel (benchmarks/results/sampling_split_h200.md,
  // k=50): V=128256 B=1 14.4 vs 59.0 us, B=64 45.4 vs 63.3, B=512 251 vs 158 (k=2048 rows: 1.1-1.5x
  // the streaming kernel's time); no pre-Hopper GPU here to confirm.
  if (d.major < 9) {
    const bool covered = !p.top_k_arr && p.top_k_val > 0 && p.top_k_val <= fs::kSplitMaxK && p.top_k_val < p.V &&
                         (!p.is_logits || (!p.temp_arr && p.temp_val > 0.0f));
    return (split_ok && cluster == 0 && covered && 2 * p.B <= d.sms) ? kSplit : kStream;
  }
  const Kind legacy = p.B >= d.stream_min_b ? kStream : kCluster;
  if (cluster == 999) return legacy;  // the policy before the filter kernel
  if (cluster >= 1000) return kFilter;
  if (cluster < 0) return kStream;
  if (cluster > 0) return kCluster;
  // H200, 2026-12-01 (benchmarks/results/sampling_filter_probe_h200.json): the filter kernel wins
  // from ~6M fp32 tokens per call and B >= 48 (V=128256: B=64 38 vs 47 us, B=512 124 vs 170 us;
  // V=32000: from B=256), the resident-row cluster kernel below (B=1, V=128256: 18 vs 32 us);
  // 16-bit rows need twice the tokens. FIB_SAMPLING_FILTER_MIN_TOKENS overrides the threshold.
  const double tokens = static_cast<double>(p.B) * static_cast<double>(p.V) * (p.elem16 ? 0.5 : 1.0);
  return (p.B >= 48 && tokens >= d.filter_min_tokens) ? kFilter : legacy;
}

// CTAs per row of the filter kernel: forced (cluster = 1000 + S) or automatic, then at most one
// CTA per 4096 tokens (automatic only) and at most 8 (portable cluster size).
int filter_cluster(const DevInfo& d, int B, int V, int cluster) {
  // automatic: 2 CTAs per row below one CTA per SM (B=64, V=128256: S=2 38 us, S=1 47, S=4 54),
  // else 1
  int S = cluster > 1000 ? cluster - 1000 : (B < d.sms ? 2 : 1);
  const int s_use = (V + 4095) / 4096;
  if (cluster <= 1000 && S > s_use) S = s_use;
  if (S > fs::kMaxCluster) S = fs::kMaxCluster;
  if (S < 1) S = 1;
  return S;
}

template <int DT>
void launch_filter(fs::Params p, int S, cudaStream_t st) {
  int chunk = (p.V + S - 1) / S;
  chunk = (chunk + 7) & ~7;
  p.chunk = chunk;
  p.resident = 0;
  p.hist_bytes = kHistBytes;  // rows the filter does not cover run sample_row from global memory
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(S, p.B, 1);
  cfg.blockDim = dim3(fs::kThreads, 1, 1);
  cfg.dynamicSmemBytes = fs::kFilterSmem;
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = S;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  check_cuda(cudaLaunchKernelEx(&cfg, fs::filter_kernel<DT>, p), "cudaLaunchKernelEx(filter)");
}

// The split kernel's workspace, one per (device, stream): kSplitDoneBytes of per-row counters
// (zero between calls: every call leaves them at zero), then the rows. Grown on demand, also inside
// a graph capture (allocation with this thread in relaxed capture mode, zeroed on a private stream
// before the captured kernel can run); an outgrown buffer stays allocated (graphs captured
// earlier still point at it). Graphs captured on one stream share its workspace: replaying two
// of them concurrently on different streams is not supported (sampling is not graph-captured by
// vLLM or SGLang today).
struct Workspace {
  unsigned char* ptr = nullptr;
  size_t bytes = 0;
};
std::mutex g_ws_mu;
std::unordered_map<cudaStream_t, Workspace> g_ws[kMaxDev];
cudaStream_t g_ws_init[kMaxDev];
constexpr size_t kWsMaxBytes = size_t(512) << 20;

unsigned char* split_workspace(int dev, cudaStream_t st, size_t need) {
  need += fs::kSplitDoneBytes;
  if (need > kWsMaxBytes) return nullptr;
  std::lock_guard<std::mutex> lk(g_ws_mu);
  Workspace& w = g_ws[dev][st];
  if (w.bytes >= need) return w.ptr;
  size_t bytes = size_t(4) << 20;
  while (bytes < need) bytes <<= 1;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  void* ptr = nullptr;
  bool ok = (g_ws_init[dev] || cudaStreamCreateWithFlags(&g_ws_init[dev], cudaStreamNonBlocking) == cudaSuccess) &&
            cudaMalloc(&ptr, bytes) == cudaSuccess;
  ok = ok && cudaMemsetAsync(ptr, 0, bytes, g_ws_init[dev]) == cudaSuccess &&
       cudaStreamSynchronize(g_ws_init[dev]) == cudaSuccess;
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (!ok) {
    if (ptr) cudaFree(ptr);
    cudaGetLastError();
    return nullptr;
  }
  w.ptr = static_cast<unsigned char*>(ptr);
  w.bytes = bytes;
  return w.ptr;
}

int split_chunks(int V, int dt) {
  const int chunk = dt == fs::kF32 ? fs::split_chunk<fs::kF32>() : fs::split_chunk<fs::kBF16>();
  return (V + chunk - 1) / chunk;
}

template <int DT>
void launch_split(fs::Params p, const DevInfo& d, cudaStream_t st) {
  p.resident = 0;
  p.hist_bytes = kHistBytes;  // rows the split kernel does not cover run sample_row from global memory
  p.split_stream_rows = d.split_smem >= static_cast<int>(kStreamSmem) ? 1 : 0;
  fs::split_kernel<DT><<<dim3(p.split_C, p.B, 1), fs::kThreads, static_cast<size_t>(d.split_smem), st>>>(p);
  check_cuda(cudaGetLastError(), "split kernel launch");
}

template <int DT>
void launch(const fs::Params& p, const Config& c, const DevInfo& d, cudaStream_t st, bool stream_k) {
  if (stream_k) {
    fs::stream_kernel<DT><<<dim3(p.B, 1, 1), fs::kThreads, kStreamSmem, st>>>(p);
    check_cuda(cudaGetLastError(), "stream kernel launch");
    return;
  }
  if (d.major >= 9) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(c.S, p.B, 1);
    cfg.blockDim = dim3(fs::kThreads, 1, 1);
    cfg.dynamicSmemBytes = c.smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = c.S;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    check_cuda(cudaLaunchKernelEx(&cfg, fs::sampler_kernel<DT>, p), "cudaLaunchKernelEx");
  } else {
    fs::sampler_kernel<DT><<<dim3(1, p.B, 1), fs::kThreads, c.smem, st>>>(p);
    check_cuda(cudaGetLastError(), "kernel launch");
  }
}

void* opt_ptr(const Optional<TensorView>& t) {
  return t.has_value() ? static_cast<char*>(t.value().data_ptr()) + t.value().byte_offset() : nullptr;
}

void check_param(const Optional<TensorView>& t, int B, const char* name, bool is_int) {
  if (!t.has_value()) return;
  const TensorView& v = t.value();
  if (v.ndim() != 1 || (v.size(0) != B && v.size(0) != 1) || (v.size(0) > 1 && v.stride(0) != 1)) {
    TVM_FFI_THROW(ValueError) << "fib sampling: " << name << " must be a contiguous 1-D tensor of size B (" << B
                              << ") or 1";
  }
  DLDataType dt = v.dtype();
  bool ok = is_int ? (dt.code == kDLInt && (dt.bits == 32 || dt.bits == 64)) : (dt.code == kDLFloat && dt.bits == 32);
  if (!ok) TVM_FFI_THROW(TypeError) << "fib sampling: " << name << (is_int ? " must be int32/int64" : " must be float32");
  if (v.device().device_type != kDLCUDA) TVM_FFI_THROW(ValueError) << "fib sampling: " << name << " must be on the GPU";
}

}  // namespace

// mode: 0 sample -> out_idx (int64 [B]); 1 renormalised probs -> out_vals (float32 [B,V]);
// 2 masked logits -> out_vals (input dtype [B,V]). Parameter tensors are per row ([B]) or
// broadcast ([1]); a missing tensor uses the scalar. stream < 0: the stream tvm-ffi provides
// (the caller framework's current stream); otherwise that cudaStream_t.
int64_t sample(TensorView input, Optional<TensorView> out_idx, Optional<TensorView> out_vals, int64_t mode,
               int64_t is_logits, Optional<TensorView> top_k, int64_t top_k_val, Optional<TensorView> top_p,
               double top_p_val, Optional<TensorView> min_p, double min_p_val, Optional<TensorView> temperature,
               double temp_val, int64_t joint, Optional<TensorView> seed, int64_t seed_val,
               Optional<TensorView> offset, int64_t offset_val, int64_t cluster, int64_t stream) {
  if (input.ndim() != 2) TVM_FFI_THROW(ValueError) << "fib sampling: input must be 2-D [B, V]";
  if (input.device().device_type != kDLCUDA) TVM_FFI_THROW(ValueError) << "fib sampling: input must be a CUDA tensor";
  const int dt = dtype_code(input.dtype());
  if (dt < 0) TVM_FFI_THROW(TypeError) << "fib sampling: input dtype must be float32, bfloat16 or float16";
  if (!is_logits && dt != fs::kF32) TVM_FFI_THROW(TypeError) << "fib sampling: probs must be float32";
  const int64_t B64 = input.size(0), V64 = input.size(1);
  if (B64 == 0) return 0;
  if (V64 < 1 || V64 > (int64_t(1) << 30)) TVM_FFI_THROW(ValueError) << "fib sampling: bad vocabulary size " << V64;
  if (B64 > 65535) TVM_FFI_THROW(ValueError) << "fib sampling: at most 65535 rows per call";
  if (input.stride(1) != 1) TVM_FFI_THROW(ValueError) << "fib sampling: rows must be contiguous (stride(1) == 1)";
  const int B = static_cast<int>(B64), V = static_cast<int>(V64);
  const int dev = input.device().device_id;

  fs::Params p = {};
  p.in = static_cast<const char*>(input.data_ptr()) + input.byte_offset();
  p.in_stride = input.stride(0);
  p.B = B;
  p.V = V;
  p.is_logits = is_logits ? 1 : 0;
  p.mode = static_cast<int>(mode);
  p.joint = joint ? 1 : 0;
  p.elem16 = dt != fs::kF32 ? 1 : 0;
  if (mode == fs::kSample) {
    if (!out_idx.has_value()) TVM_FFI_THROW(ValueError) << "fib sampling: out_idx required";
    const TensorView& o = out_idx.value();
    if (o.ndim() != 1 || o.size(0) != B || o.dtype().code != kDLInt || o.dtype().bits != 64 || o.stride(0) != 1)
      TVM_FFI_THROW(ValueError) << "fib sampling: out_idx must be a contiguous int64 [B] tensor";
    p.out_idx = reinterpret_cast<int64_t*>(opt_ptr(out_idx));
  } else if (mode == fs::kRenormProbs || mode == fs::kMaskLogits) {
    if (!out_vals.has_value()) TVM_FFI_THROW(ValueError) << "fib sampling: out_vals required";
    const TensorView& o = out_vals.value();
    const int odt = dtype_code(o.dtype());
    if (o.ndim() != 2 || o.size(0) != B || o.size(1) != V || o.stride(1) != 1 ||
        odt != (mode == fs::kRenormProbs ? static_cast<int>(fs::kF32) : dt))
      TVM_FFI_THROW(ValueError) << "fib sampling: out_vals must be [B, V], rows contiguous, "
                                << (mode == fs::kRenormProbs ? "float32" : "the input dtype");
    p.out_vals = opt_ptr(out_vals);
    p.out_stride = o.stride(0);
  } else {
    TVM_FFI_THROW(ValueError) << "fib sampling: bad mode " << mode;
  }
  check_param(top_k, B, "top_k", true);
  check_param(top_p, B, "top_p", false);
  check_param(min_p, B, "min_p", false);
  check_param(temperature, B, "temperature", false);
  check_param(seed, B, "seed", true);
  check_param(offset, B, "offset", true);
  auto bcast = [&](const Optional<TensorView>& t) { return t.has_value() && t.value().size(0) == 1 && B > 1; };
  if (bcast(top_k) || bcast(top_p) || bcast(min_p) || bcast(temperature)) {
    TVM_FFI_THROW(ValueError) << "fib sampling: top_k/top_p/min_p/temperature tensors must have B entries";
  }
  if ((seed.has_value() && seed.value().dtype().bits != 64) || (offset.has_value() && offset.value().dtype().bits != 64))
    TVM_FFI_THROW(TypeError) << "fib sampling: seed/offset tensors must be int64";

  p.top_k_arr = opt_ptr(top_k);
  p.top_k_is64 = top_k.has_value() && top_k.value().dtype().bits == 64;
  p.top_k_val = top_k_val > 0x7fffffff ? 0x7fffffff : static_cast<int>(top_k_val < 0 ? 0 : top_k_val);
  p.has_topk = top_k.has_value() || (top_k_val > 0 && top_k_val < V);
  p.top_p_arr = static_cast<const float*>(opt_ptr(top_p));
  p.top_p_val = static_cast<float>(top_p_val);
  p.has_topp = top_p.has_value() || top_p_val < 1.0;
  p.min_p_arr = static_cast<const float*>(opt_ptr(min_p));
  p.min_p_val = static_cast<float>(min_p_val);
  p.has_minp = min_p.has_value() || min_p_val > 0.0;
  p.temp_arr = static_cast<const float*>(opt_ptr(temperature));
  p.temp_val = static_cast<float>(temp_val);
  p.seed_arr = static_cast<const int64_t*>(opt_ptr(seed));
  p.offset_arr = static_cast<const int64_t*>(opt_ptr(offset));
  p.seed_val = seed_val;
  p.offset_val = offset_val;
  p.seed_per_row = seed.has_value() && seed.value().size(0) > 1;
  p.offset_per_row = offset.has_value() && offset.value().size(0) > 1;

  int cur = -1;
  check_cuda(cudaGetDevice(&cur), "cudaGetDevice");
  if (cur != dev) check_cuda(cudaSetDevice(dev), "cudaSetDevice");
  const DevInfo& d = dev_info(dev);
  // (temperature <= 0 turns a row into greedy = top-k 1, which needs the histogram space too)
  const bool greedy_possible = p.is_logits && (p.temp_arr || !(p.temp_val > 0.0f));
  const bool needs_hist = p.has_topk || p.has_topp || greedy_possible;
  const int forced = cluster > 0 && cluster <= fs::kMaxCluster ? static_cast<int>(cluster) : 0;
  Config c = choose_config(d, B, V, dt, forced, needs_hist, p.mode == fs::kSample && p.has_topk);
  // top-p alone: rejection needs no histograms, so the slices are laid out as for plain sampling
  // (smaller, 2 CTAs per SM at large B); rows that need the exact radix path then read their keys
  // from global memory and put the histograms where the resident keys were (>= kHistBytes).
  if (p.mode == fs::kSample && p.has_topp && !p.has_topk && !p.has_minp && !greedy_possible) {
    Config c2 = choose_config(d, B, V, dt, forced, false, false);
    if (c2.resident) {
      if (c2.smem < static_cast<size_t>(kHistBytes)) c2.smem = kHistBytes;
      c = c2;
    }
  }
  p.chunk = c.chunk;
  p.resident = c.resident;
  p.hist_bytes = c.hist_bytes;
  cudaStream_t st = stream >= 0 ? reinterpret_cast<cudaStream_t>(stream)
                                : static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, dev));
  Kind kind = kernel_kind(d, p, static_cast<int>(cluster));
  if (kind == kSplit) {
    p.split_C = split_chunks(V, dt);
    p.ws_row_bytes = static_cast<int>(fs::split_row_bytes(p.split_C));
    p.ws = p.split_C <= fs::kSplitMaxC
               ? split_workspace(dev, st, static_cast<size_t>(B) * static_cast<size_t>(p.ws_row_bytes))
               : nullptr;
    if (!p.ws) {  // (no workspace: the policy without the split kernel)
      cluster = 0;
      kind = kernel_kind(d, p, 0, false);
    }
  }
  int64_t used = kind == kStream ? -1 : c.S;
  if (kind == kSplit) {
    used = 2000 + p.split_C;
    switch (dt) {
      case fs::kF32: launch_split<fs::kF32>(p, d, st); break;
      case fs::kBF16: launch_split<fs::kBF16>(p, d, st); break;
      default: launch_split<fs::kF16>(p, d, st); break;
    }
  } else if (kind == kFilter) {
    const int S = filter_cluster(d, B, V, static_cast<int>(cluster));
    used = 1000 + S;
    switch (dt) {
      case fs::kF32: launch_filter<fs::kF32>(p, S, st); break;
      case fs::kBF16: launch_filter<fs::kBF16>(p, S, st); break;
      default: launch_filter<fs::kF16>(p, S, st); break;
    }
  } else {
    const bool stream_k = kind == kStream;
    switch (dt) {
      case fs::kF32: launch<fs::kF32>(p, c, d, st, stream_k); break;
      case fs::kBF16: launch<fs::kBF16>(p, c, d, st, stream_k); break;
      default: launch<fs::kF16>(p, c, d, st, stream_k); break;
    }
  }
  if (cur != dev) cudaSetDevice(cur);
  return used;
}

int64_t current_stream(TensorView t) {
  return reinterpret_cast<int64_t>(TVMFFIEnvGetStream(t.device().device_type, t.device().device_id));
}

tvm::ffi::String launch_config(int64_t B, int64_t V, int64_t dt, int64_t cluster, int64_t device) {
  const DevInfo& d = dev_info(static_cast<int>(device));
  // the geometry of a top-k sampling call (cluster kernel below the streaming threshold)
  Config c = choose_config(d, static_cast<int>(B), static_cast<int>(V), static_cast<int>(dt),
                           cluster > 0 && cluster <= fs::kMaxCluster ? static_cast<int>(cluster) : 0, true, true);
  fs::Params q = {};
  q.B = static_cast<int>(B);
  q.mode = fs::kSample;
  q.has_topk = 1;
  q.V = static_cast<int>(V);
  q.elem16 = dt != fs::kF32 ? 1 : 0;
  const Kind kind = kernel_kind(d, q, static_cast<int>(cluster));
  if (kind == kSplit) {
    c.S = split_chunks(static_cast<int>(V), static_cast<int>(dt));
    c.chunk = dt == fs::kF32 ? fs::split_chunk<fs::kF32>() : fs::split_chunk<fs::kBF16>();
    c.resident = 0;
    c.smem = static_cast<size_t>(d.split_smem);
  } else if (kind == kFilter) {
    c.S = filter_cluster(d, static_cast<int>(B), static_cast<int>(V), static_cast<int>(cluster));
    c.chunk = ((static_cast<int>(V) + c.S - 1) / c.S + 7) & ~7;
    c.resident = 0;
    c.smem = fs::kFilterSmem;
  }
  return tvm::ffi::String(std::to_string(c.S) + "," + std::to_string(c.chunk) + "," + std::to_string(c.resident) + "," +
                          std::to_string(c.smem) + "," + std::to_string(d.sms) + "," + std::to_string(d.major) + "," +
                          std::to_string(static_cast<int>(kind)));
}

#ifdef FIB_SAMPLING_PROFILE
// profiling builds: the filter kernel's phase timestamps of the last call (row 0, rank 0), as
// "t1-t0,t2-t0,...,t9-t0 (ns),compactions,compacted entries"
tvm::ffi::String prof_read() {
  unsigned long long h[24] = {};
  check_cuda(cudaDeviceSynchronize(), "sync");
  check_cuda(cudaMemcpyFromSymbol(h, fs::g_fib_prof, sizeof(h)), "cudaMemcpyFromSymbol");
  std::string r;
  for (int i = 1; i <= 9; ++i) r += std::to_string(static_cast<long long>(h[i] - h[0])) + ",";
  r += std::to_string(h[10]) + "," + std::to_string(h[11]);
  r += "," + std::to_string(static_cast<long long>(h[12] - h[0])) + "," + std::to_string(static_cast<long long>(h[13] - h[0]));
  r += "," + std::to_string(h[14]) + "," + std::to_string(h[15]);
  for (int i = 16; i <= 19; ++i) r += "," + std::to_string(static_cast<long long>(h[i] - h[0]));
  r += "," + std::to_string(h[21]);
  // then every slot as a time since h[0] (0 where unset): fields 20..43
  for (int i = 0; i < 24; ++i) r += "," + std::to_string(h[i] ? static_cast<long long>(h[i] - h[0]) : 0LL);
  return tvm::ffi::String(r);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(prof_read, prof_read);
#endif
TVM_FFI_DLL_EXPORT_TYPED_FUNC(sample, sample);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(current_stream, current_stream);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(launch_config, launch_config);
