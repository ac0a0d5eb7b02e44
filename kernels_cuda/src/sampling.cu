// fib-runtime sampling family: tvm-ffi bindings and launch logic.
// Exported functions (see fib_runtime/kernels/sampling.py for the Python API):
//   sample(input, out, flags, top_k, top_p, min_p, temperature, seed, offset, cluster, stream)
//                          -> int64 the kernel used: S (cluster kernel, S CTAs per row), -1
//                             (streaming kernel), -2 (plain kernel), 1000 + S (filter kernel), 2000 + C (split
//                             kernel, C chunks per row), 3000 + S / 4000 + S (two-pass kernel, one / two
//                             CTAs per SM), 5000 + S / 6000 + S (its large-k instantiation), 7000 + S
//                             (the cluster kernel's gathered-tail instantiation); flags bits
//                             16-46: the caller's min_top_k hint; one launch, no host sync; no allocation
//                             but the split kernel's workspace (per device and stream, grown on
//                             demand, also during graph capture)
//   sample_alloc(input, flags, top_k, ..., stream) -> the sampled tokens, the output allocated
//                          through the caller's allocator (mode 0)
//   describe_args(input, out, flags, top_k, ..., offset) -> the Params sample would use (tests)
//   current_stream(t)      -> int64 the stream tvm-ffi hands this library for t's device
//   launch_config(B, V, dtype_code, cluster, device) -> "S,chunk,resident,smem,sms,major,kind"
//   prof_read()            -> the filter kernel's phase times (profiling builds only)
//   build_config()         -> "twopass_spec=0,twopass_reject_tail=0,profile=0": compile-time switches
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/string.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>
#include <string>

#include "fib/sampling/filter.cuh"
#include "fib/sampling/twopass.cuh"
#include "fib/sampling/host_args.h"
#include "fib/sampling/split.cuh"
#include "fib/sampling/plain.cuh"
#include "fib/sampling/stream.cuh"
#include "fib/sampling/host_policy.h"

#include <cstdlib>

using tvm::ffi::AnyView;
using tvm::ffi::TensorView;
namespace fs = fib::sampling;

namespace {

// Programmatic dependent launch (FIB_SAMPLING_PDL, sm_90; the kernels' pdl_enter()): go(pdl) launches;
// a launch the runtime refuses with the attribute (a driver without it) is cleared and launched
// again without it, and the device's launches stop asking for it
template <class F>
cudaError_t launch_pdl(const DevInfo& d, F&& go) {
  const bool pdl = d.pdl && d.major >= 9 && !d.pdl_refused.load(std::memory_order_relaxed);
  cudaError_t e = go(pdl);
  if (e != cudaSuccess && pdl) {
    (void)cudaGetLastError();
    e = go(false);
    if (e == cudaSuccess) d.pdl_refused.store(true, std::memory_order_relaxed);
  }
  return e;
}

// a kernel of no cluster: <<<>>>, or cudaLaunchKernelEx with programmatic stream serialization
template <class K>
cudaError_t launch_grid(K kern, dim3 grid, size_t smem, const fs::Params& p, cudaStream_t st, bool pdl) {
  if (!pdl) {
    kern<<<grid, fs::kThreads, smem, st>>>(p);
    return cudaGetLastError();
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(fs::kThreads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute attr = fs::pdl_launch_attr();
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kern, p);
}

// rb: the large-k instantiation's row's-bound kernel (one CTA per SM only)
template <int DT, int MINB>
void launch_twopass(const fs::Params& p, int S, bool lk, bool rb, const DevInfo& d, cudaStream_t st) {
  check_cuda(launch_pdl(d, [&](bool pdl) {
               if constexpr (MINB == 1) {
                 return lk ? (rb ? fs::launch_twopass_rows<DT, 1, true, true>(p, S, st, pdl)
                                 : fs::launch_twopass_rows<DT, 1, true>(p, S, st, pdl))
                           : fs::launch_twopass_rows<DT, 1, false>(p, S, st, pdl);
               } else {
                 (void)rb;
                 return lk ? fs::launch_twopass_rows<DT, MINB, true>(p, S, st, pdl)
                           : fs::launch_twopass_rows<DT, MINB, false>(p, S, st, pdl);
               }
             }),
             "cudaLaunchKernelEx(twopass)");
}

template <int DT>
void launch_filter(const fs::Params& p, int S, const DevInfo& d, cudaStream_t st) {
  static_assert(kHistBytes == 2 * fs::kHistBufBytes, "launch_filter_rows gives sample_row's rows this layout");
  check_cuda(launch_pdl(d, [&](bool pdl) { return fs::launch_filter_rows<DT>(p, S, st, pdl); }),
             "cudaLaunchKernelEx(filter)");
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
// FIB_SAMPLING_REJECT_MIN_K below this reaches only top_k_first calls with top-p (see p.rej_min_k below)
constexpr int kRejOtherMinK = 1024;

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
  check_cuda(launch_pdl(d, [&](bool pdl) {
               return launch_grid(fs::split_kernel<DT>, dim3(p.split_C, p.B, 1), static_cast<size_t>(d.split_smem), p, st, pdl);
             }),
             "split kernel launch");
}

template <int DT>
void launch_plain(fs::Params p, const DevInfo& d, cudaStream_t st) {
  p.hist_bytes = kHistBytes;  // (sample_row's layout for the rows the kernel hands it)
  p.resident = 0;
  p.chunk = p.V;
  check_cuda(launch_pdl(d, [&](bool pdl) { return launch_grid(fs::plain_kernel<DT>, dim3(p.B, 1, 1), kHistBytes, p, st, pdl); }),
             "plain kernel launch");
}

template <int DT>
void launch(const fs::Params& p, const Config& c, const DevInfo& d, cudaStream_t st, bool stream_k, bool gather) {
  if (stream_k) {
    check_cuda(launch_pdl(d, [&](bool pdl) { return launch_grid(fs::stream_kernel<DT>, dim3(p.B, 1, 1), kStreamSmem, p, st, pdl); }),
               "stream kernel launch");
    return;
  }
  if (d.major >= 9) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(c.S, p.B, 1);
    cfg.blockDim = dim3(fs::kThreads, 1, 1);
    cfg.dynamicSmemBytes = c.smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = c.S;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1] = fs::pdl_launch_attr();  // (FIB_SAMPLING_PDL)
    cfg.attrs = attr;
    auto* kern = fs::sampler_kernel<DT>;
    if constexpr (DT == fs::kF32) {
      if (p.has_topk)
        kern = gather ? fs::sampler_kernel<DT, true, true>
               : (c.S >= 2 && c.S <= d.push_max_s && (!p.is_logits || d.push_logits)) ? fs::sampler_kernel<DT, true, false, true>  // (the exchange: probs; logits with FIB_SAMPLING_CLUSTER_PUSH_LOGITS)
                                                   : fs::sampler_kernel<DT, true>;
    } else {
      if (gather) kern = fs::sampler_kernel<DT, false, true>;
    }
    // programmatic dependent launch for top-k sampling only: plain sampling ran this kernel slower with
    // it (H100, B=64 V=128256: fp32 30.3 -> 31.8 us, bf16 28.9 -> 31.7; results/sampling_plain_pdl_h100.json),
    // so the calls without top-k (plain, top-p, min-p: the same row code) and the renorm / mask modes
    // launch without it (with it: 3-5% faster for top-k at B = 1 / 16, the grid)
    const bool topk_call = p.has_topk && p.mode == fs::kSample;
    check_cuda(launch_pdl(d, [&](bool pdl) {
                 cfg.numAttrs = pdl && topk_call ? 2 : 1;
                 return cudaLaunchKernelEx(&cfg, kern, p);
               }),
               "cudaLaunchKernelEx");
  } else {
    fs::sampler_kernel<DT><<<dim3(1, p.B, 1), fs::kThreads, c.smem, st>>>(p);
    check_cuda(cudaGetLastError(), "kernel launch");
  }
}

}  // namespace

// flags: the mode (0 sample -> out: int64 [B]; 1 renormalised probs -> out: float32 like the
// input; 2 masked logits -> out: the input's dtype and shape) | 4 logits input | 8 joint order.
// top_k, top_p, min_p, temperature: None, a number or a per-row tensor of B entries; seed, offset:
// an int or an int64 tensor of 1 or B entries (host_args.h). stream < 0: the stream tvm-ffi
// provides (the caller framework's current stream); otherwise that cudaStream_t.
int64_t sample(TensorView input, TensorView out, int64_t flags, AnyView top_k, AnyView top_p, AnyView min_p,
               AnyView temperature, AnyView seed, AnyView offset, int64_t cluster, int64_t stream) {
  fs::host::Call call = fs::host::read_call(input, out, flags, top_k, top_p, min_p, temperature, seed, offset, true);
  fs::Params& p = call.p;
  if (p.B == 0) return 0;
  const int B = p.B, V = p.V, dt = call.dt, dev = call.dev.device_id;
  // knob 7000 + S: the cluster kernel with S CTAs per row in its gathered-tail instantiation
  const bool force_gather = cluster > 7000 && cluster <= 7000 + fs::kMaxCluster;
  if (force_gather) cluster -= 7000;

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
  // the threshold reaches only sampling calls with top-p in the top_k_first order (sample_row's rejection after
  // the top-k, the closed candidate paths, the listing's summary; the gathered tail below): joint calls
  // and calls without top-p run as at 1024 (kRejOtherMinK) whatever it says. Joint rows leave the
  // candidate paths above it, which is slower below 1024 (H100, flat joint B=1 V=128256 k=1024: 27.5
  // us with candidates, 32.9 without; k=300 20.1 / 32.8), and calls without top-p lose the summary
  const bool rej_call = p.mode == fs::kSample && p.has_topp && !p.joint;
  p.rej_min_k = d.rej_min_k > 0 && d.rej_min_k < kRejOtherMinK && !rej_call ? kRejOtherMinK : d.rej_min_k;
  p.rej_joint_min_k = d.rej_joint_min_k;
  p.gather_cap = d.gather_cap;
  p.gather_direct = d.gather_direct ? 1 : 0;
  // the cluster kernel's gathered tail (gather_tail.cuh): calls whose every row has k > p.rej_min_k
  // (top_k_first; a scalar top_k, or the min_top_k hint), sm_90
  const int64_t min_k = p.top_k_arr ? fs::host::min_k_hint(flags) : static_cast<int64_t>(p.top_k_val);
  const bool gather = d.major >= 9 && d.gather_cap > 0 && p.has_topk &&
                      (force_gather || (p.mode == fs::kSample && p.has_topk && !p.joint && p.rej_min_k > 0 &&
                                        min_k > p.rej_min_k));
  cudaStream_t st = stream >= 0 ? reinterpret_cast<cudaStream_t>(stream)
                                : static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, dev));
  const int esize = dt == fs::kF32 ? 4 : 2;
  Kind kind = kernel_kind(d, p, static_cast<int>(cluster), esize);
  if (kind == kSplit) {
    p.split_C = split_chunks(V, dt);
    p.ws_row_bytes = static_cast<int>(fs::split_row_bytes(p.split_C));
    p.ws = p.split_C <= fs::kSplitMaxC
               ? split_workspace(dev, st, static_cast<size_t>(B) * static_cast<size_t>(p.ws_row_bytes))
               : nullptr;
    if (!p.ws) {  // (no workspace: the policy without the split kernel)
      cluster = 0;
      kind = kernel_kind(d, p, 0, esize, false);
    }
  }
  int64_t used = kind == kStream ? -1 : (kind == kPlain ? -2 : c.S);
  if (kind == kPlain) {
    switch (dt) {
      case fs::kF32: launch_plain<fs::kF32>(p, d, st); break;
      case fs::kBF16: launch_plain<fs::kBF16>(p, d, st); break;
      default: launch_plain<fs::kF16>(p, d, st); break;
    }
  } else if (kind == kSplit) {
    used = 2000 + p.split_C;
    switch (dt) {
      case fs::kF32: launch_split<fs::kF32>(p, d, st); break;
      case fs::kBF16: launch_split<fs::kBF16>(p, d, st); break;
      default: launch_split<fs::kF16>(p, d, st); break;
    }
  } else if (kind == kTwoPass) {
    const bool lk = twopass_large_k(d, p, fs::host::min_k_hint(flags), static_cast<int>(cluster));
    const int S = twopass_cluster(d, B, V, static_cast<int>(cluster >= 5000 ? cluster - 2000 : cluster));
    used = (lk ? 5000 : 3000) + S;
    // the row's bound: top_k_first rows of several CTAs (joint rows were 0.99-1.03x with it, H200)
    const bool rb = lk && S > 1 && d.twopass_rb && !p.joint;
    switch (dt) {
      case fs::kF32: launch_twopass<fs::kF32, 1>(p, S, lk, rb, d, st); break;
      case fs::kBF16: launch_twopass<fs::kBF16, 1>(p, S, lk, rb, d, st); break;
      default: launch_twopass<fs::kF16, 1>(p, S, lk, rb, d, st); break;
    }
  } else if (kind == kTwoPass2) {
    const bool lk = twopass_large_k(d, p, fs::host::min_k_hint(flags), static_cast<int>(cluster));
    const int S = twopass2_cluster(d, B, V, static_cast<int>(cluster >= 6000 ? cluster - 2000 : cluster));
    used = (lk ? 6000 : 4000) + S;
    switch (dt) {
      case fs::kF32: launch_twopass<fs::kF32, 2>(p, S, lk, false, d, st); break;
      case fs::kBF16: launch_twopass<fs::kBF16, 2>(p, S, lk, false, d, st); break;
      default: launch_twopass<fs::kF16, 2>(p, S, lk, false, d, st); break;
    }
  } else if (kind == kFilter) {
    const int S = filter_cluster(d, B, V, static_cast<int>(cluster));
    used = 1000 + S;
    switch (dt) {
      case fs::kF32: launch_filter<fs::kF32>(p, S, d, st); break;
      case fs::kBF16: launch_filter<fs::kBF16>(p, S, d, st); break;
      default: launch_filter<fs::kF16>(p, S, d, st); break;
    }
  } else {
    const bool stream_k = kind == kStream;
    if (!stream_k && gather) used += 7000;  // (the gathered-tail instantiation)
    switch (dt) {
      case fs::kF32: launch<fs::kF32>(p, c, d, st, stream_k, gather); break;
      case fs::kBF16: launch<fs::kBF16>(p, c, d, st, stream_k, gather); break;
      default: launch<fs::kF16>(p, c, d, st, stream_k, gather); break;
    }
  }
  if (cur != dev) cudaSetDevice(cur);
  return used;
}

// sample() in mode 0 with the output allocated here, through the caller framework's allocator
// (TVMFFIEnvTensorAlloc: for torch tensors torch's caching allocator, on the current stream):
// int64 [B], or 0-d for a 1-D input. Returned as the framework's tensor type.
tvm::ffi::Tensor sample_alloc(TensorView input, int64_t flags, AnyView top_k, AnyView top_p, AnyView min_p,
                              AnyView temperature, AnyView seed, AnyView offset, int64_t cluster, int64_t stream) {
  if ((flags & fs::host::kFlagModeMask) != fs::kSample)
    TVM_FFI_THROW(ValueError) << "fib sampling: sample_alloc is for sampling (mode 0)";
  if (input.ndim() != 2 && input.ndim() != 1) TVM_FFI_THROW(ValueError) << "fib sampling: input must be [B, V] or [V]";
  if (TVMFFIEnvGetDLPackManagedTensorAllocator() == nullptr)  // (the wrapper then allocates and calls sample)
    TVM_FFI_THROW(TypeError) << "fib sampling: no framework allocator for sample_alloc";
  const int64_t shape[1] = {input.ndim() == 2 ? input.size(0) : 1};
  tvm::ffi::Tensor out = tvm::ffi::Tensor::FromEnvAlloc(
      TVMFFIEnvTensorAlloc, tvm::ffi::ShapeView(shape, input.ndim() == 2 ? 1 : 0), DLDataType{kDLInt, 64, 1},
      input.device());
  sample(input, TensorView(out), flags, top_k, top_p, min_p, temperature, seed, offset, cluster, stream);
  return out;
}

// The Params `sample` would launch with, as "key=value,..." (no device needed: CPU tensors are
// accepted, nothing is launched). For the argument tests.
tvm::ffi::String describe_args(TensorView input, TensorView out, int64_t flags, AnyView top_k, AnyView top_p,
                               AnyView min_p, AnyView temperature, AnyView seed, AnyView offset) {
  return tvm::ffi::String(fs::host::describe(
      fs::host::read_call(input, out, flags, top_k, top_p, min_p, temperature, seed, offset, false)));
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
  const Kind kind = kernel_kind(d, q, static_cast<int>(cluster), dt == fs::kF32 ? 4 : 2);
  if (kind == kSplit) {
    c.S = split_chunks(static_cast<int>(V), static_cast<int>(dt));
    c.chunk = dt == fs::kF32 ? fs::split_chunk<fs::kF32>() : fs::split_chunk<fs::kBF16>();
    c.resident = 0;
    c.smem = static_cast<size_t>(d.split_smem);
  } else if (kind == kTwoPass || kind == kTwoPass2) {
    const int knob = static_cast<int>(cluster >= 5000 && cluster < 7000 ? cluster - 2000 : cluster);
    c.S = kind == kTwoPass ? twopass_cluster(d, static_cast<int>(B), static_cast<int>(V), knob)
                           : twopass2_cluster(d, static_cast<int>(B), static_cast<int>(V), knob);
    c.chunk = ((static_cast<int>(V) + c.S - 1) / c.S + 7) & ~7;
    c.resident = 0;
    c.smem = fs::kTwoPassSmem;
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

// The compile-time switches of this build that change which token a kernel returns or how it
// finds it ("name=value,..."): tests and benchmarks read them to know what to expect.
tvm::ffi::String build_config() {
  return tvm::ffi::String("twopass_spec=" + std::to_string(FIB_TWOPASS_SPEC) +
                          ",twopass_reject_tail=" + std::to_string(FIB_TWOPASS_REJECT_TAIL) +
#ifdef FIB_SAMPLING_PROFILE
                          ",profile=1"
#else
                          ",profile=0"
#endif
#if FIB_TWOPASS_DIAG_TWICE
                          ",diag_twice=1"
#endif
  );
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(build_config, build_config);

#ifdef FIB_SAMPLING_PROFILE
// profiling builds: the filter kernel's phase timestamps of the last call (row 0, rank 0), as
// "t1-t0,t2-t0,...,t9-t0 (ns),compactions,compacted entries"
tvm::ffi::String prof_read() {
  unsigned long long h[40] = {};
  check_cuda(cudaDeviceSynchronize(), "sync");
  check_cuda(cudaMemcpyFromSymbol(h, fs::g_fib_prof, sizeof(h)), "cudaMemcpyFromSymbol");
  std::string r;
  for (int i = 1; i <= 9; ++i) r += std::to_string(static_cast<long long>(h[i] - h[0])) + ",";
  r += std::to_string(h[10]) + "," + std::to_string(h[11]);
  r += "," + std::to_string(static_cast<long long>(h[12] - h[0])) + "," + std::to_string(static_cast<long long>(h[13] - h[0]));
  r += "," + std::to_string(h[14]) + "," + std::to_string(h[15]);
  for (int i = 16; i <= 19; ++i) r += "," + std::to_string(static_cast<long long>(h[i] - h[0]));
  r += "," + std::to_string(h[21]);
  // then every slot as a time since h[0] (0 where unset): fields 20..51
  for (int i = 0; i < 32; ++i) r += "," + std::to_string(h[i] ? static_cast<long long>(h[i] - h[0]) : 0LL);
  // then the per-warp maxima 32..39 (FIB_PROF_WMAX): odd slots globaltimer (as times since h[0]), even slots cycles
  for (int i = 32; i < 40; ++i)
    r += "," + std::to_string((i & 1) ? (h[i] ? static_cast<long long>(h[i] - h[0]) : 0LL) : static_cast<long long>(h[i]));
  // (cleared once read: only the cluster kernel's rows zero them at their start)
  const unsigned long long z[8] = {};
  check_cuda(cudaMemcpyToSymbol(fs::g_fib_prof, z, sizeof(z), 32 * sizeof(unsigned long long)), "cudaMemcpyToSymbol");
  return tvm::ffi::String(r);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(prof_read, prof_read);
// profiling builds: the per-CTA timestamps of the last call (FIB_PROF_CTA: rows < nrows, 8 ranks, 4
// events each, ns since the earliest event 0; -1 where unset), then cleared
tvm::ffi::String prof_cta_read(int64_t nrows) {
  const size_t n = static_cast<size_t>(nrows < 1024 ? (nrows < 1 ? 1 : nrows) : 1024) * 32;
  std::vector<unsigned long long> h(1024 * 32, 0ull);
  check_cuda(cudaDeviceSynchronize(), "sync");
  check_cuda(cudaMemcpyFromSymbol(h.data(), fs::g_fib_cta, h.size() * 8), "cudaMemcpyFromSymbol");
  unsigned long long t0 = ~0ull;
  for (size_t i = 0; i < n; i += 4)
    if (h[i] && h[i] < t0) t0 = h[i];
  std::string r;
  for (size_t i = 0; i < n; ++i) r += (i ? "," : "") + std::to_string(h[i] ? static_cast<long long>(h[i] - t0) : -1LL);
  std::fill(h.begin(), h.end(), 0ull);
  check_cuda(cudaMemcpyToSymbol(fs::g_fib_cta, h.data(), h.size() * 8), "cudaMemcpyToSymbol");
  return tvm::ffi::String(r);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(prof_cta_read, prof_cta_read);
#endif
TVM_FFI_DLL_EXPORT_TYPED_FUNC(sample, sample);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(sample_alloc, sample_alloc);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(current_stream, current_stream);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(describe_args, describe_args);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(launch_config, launch_config);
