// fib-runtime sampling family, host side: the per-device facts and settings (DevInfo, read once per
// device: SM count, shared memory, the FIB_SAMPLING_* knobs, each kernel's attributes), the cluster
// kernel's geometry (choose_config) and the policy that picks a kernel per call (kernel_kind, the
// CTAs per row of the filter and two-pass kernels, the large-k instantiation). Host code only, in
// an anonymous namespace: included once, by src/sampling.cu, after the kernel headers and tvm-ffi.
#pragma once
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <string>

#include "fib/sampling/host_args.h"

using tvm::ffi::AnyView;
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
  // FIB_SAMPLING_REJECT_MIN_K / FIB_SAMPLING_REJECT_JOINT_MIN_K: top-k rows with k above it sample
  // top-p by rejection in sample_row (the cluster kernel; top_k_first / joint; 0: never). H200
  // (benchmarks/results/sampling_large_k_h200.json): top_k_first k=2048 B=1 V=32000 33.5 -> 24.9 us,
  // k=1024 22.6 -> 24.0, k=512 17.4 -> 23.9; joint peaked k=512..2048 19.5..36.5 -> 13.4. Since the
  // two-pass kernel's large-k rejection tail and the gathered tail, 512 (H100,
  // benchmarks/results/sampling_rejk_h100.json, vs 1024): top_k_first from probs, k=1024 B=1 / 16 / 64 / 512
  // V=32000 21.2 / 21.8 / 39.2 / 77.1 -> 14.4 / 15.0 / 25.5 / 69.4 us, k <= 512 the same; 256 took
  // k=300 B=512 V=128256 from 134.8 to 138.7. Below 1024 it reaches only top_k_first sampling calls
  // with top-p: joint calls and calls without top-p run as at 1024 (kRejOtherMinK, sampling.cu)
  int rej_min_k = 512, rej_joint_min_k = 256;
  // FIB_SAMPLING_GATHER_CAP: the cluster kernel's gathered tail for those top_k_first rows
  // (gather_tail.cuh; its own instantiation, sampler_kernel<DT, SUMM, true>, for calls whose every
  // row is known on the host to have k > rej_min_k: a scalar top_k or the min_top_k hint; knob
  // 7000 + S forces it) takes rows narrowed to at most this many tokens (at most fs::kGatherCap;
  // 0: never). H100 (benchmarks/results/sampling_gather_h100.json): k=2048 top-k+top-p B=1 / 16 / 64
  // V=32000 21.9 / 22.5 / 31.8 -> 20.6 / 20.7 / 24.3 us, B=16 V=151936 39.3 -> 29.2, the same tokens
  int gather_cap = fs::kGatherCap;
  // FIB_SAMPLING_GATHER_DIRECT (default 1): those rows whose delegates bound the k-th largest key
  // (clusters of 6-8 CTAs: 3072-4096 delegates) gather every token at or above that bound at once when at
  // most gather_cap reach it, before any radix pass (gather_tail.cuh, the direct path)
  bool gather_direct = true;
  // FIB_SAMPLING_CLUSTER_PUSH_MAX_S: fp32 top-k calls from probs in clusters of 2..this many CTAs run
  // the cluster kernel's exchange variant (sampler_kernel<kF32, true, false, true>: delegates and
  // ranked candidate lists by st.async, no cluster barrier, rows with k <= kRankSortMax; 0 or 1:
  // never). H100 (benchmarks/results/sampling_ab_finish64_h100.json): B=64 V=32000 k=50 (2 CTAs) from
  // probs 10.87 -> 10.40 us (cake 10.44); at 6-8 CTAs it was ~0.9 us slower (sampling_ab_cluster_push_h100.json).
  // Calls from logits keep the top-k instantiation: there the exchange cost B=64 V=32000 0.15 us on
  // the H100 (sampling_ab_push_probs_h100.json), and the H200 grid of the exchange for both had those
  // rows ~0.6 us slower than the one before it (sampling_h200.md)
  int push_max_s = 2;
  // FIB_SAMPLING_CLUSTER_PUSH_LOGITS (default 0): calls from logits take the exchange as well. Since
  // the listing rows stopped storing keys it gains a little on the H100 (B=64 V=32000 k=50 from
  // logits 11.03 / 10.97 -> 10.88 / 10.86 us, joint 12.55 / 12.49 -> 12.36 / 12.29; the sampling GPU
  // suite passed with it on: sampling_ab_push_logits_h100.json, sampling_push_logits_h100_pytest.log),
  // but the H200 grid of the exchange for both had those rows ~0.6 us slower (78155bd, with the key
  // stores): off until an H200 A/B of this build
  bool push_logits = false;
  // FIB_SAMPLING_PLAIN_MIN_B: plain sampling (no filter) of batches from this size (from half of it
  // for rows of at most 320 KB) runs the one-pass plain kernel (plain.cuh)
  int plain_min_b = 128;
  // the two-pass kernel's clusters of S CTAs that can be resident at once (cudaOccupancyMaxActiveClusters;
  // clusters are placed within one GPC, so 8-CTA clusters of one CTA per SM fit fewer than #SMs / 8)
  int tp_clusters[fs::kMaxCluster + 1] = {};
  // FIB_SAMPLING_TWOPASS_MAX_B: top-k sampling batches below this size (from 48 rows, and from
  // 6M tokens or FIB_SAMPLING_STREAM_MIN_B rows) run the two-pass kernel (sm_90) with one CTA per
  // SM, batches from this size (and 6M tokens) the two-pass kernel with two CTAs per SM
  int twopass_max_b = 256;
  // FIB_SAMPLING_TWOPASS_LARGE_K (default 1; 0 turns it off): the two-pass kernel's large-k
  // instantiation (twopass.cuh, LK) runs the calls whose every row's top_k is known on the host to
  // exceed kTpSeedMaxK (its knobs 5000 / 6000 + S reach it either way)
  bool twopass_lk = true;
  // FIB_SAMPLING_TWOPASS_ROW_BOUND (default 1; 0 turns it off): top_k_first calls of the large-k
  // instantiation with one CTA per SM and several CTAs per row run its row's-bound instantiation
  // (twopass_kernel<DT, 1, true, true>, twopass.cuh FIB_TWOPASS_ROW_BOUND)
  bool twopass_rb = FIB_TWOPASS_ROW_BOUND != 0;
  // FIB_SAMPLING_TWOPASS2_MIN_B (default 0: never): two-pass batches from this size below
  // FIB_SAMPLING_TWOPASS_MAX_B run the kernel with two CTAs per SM, 2 #SMs / B CTAs per row (at
  // most one per 16384 tokens, at most 8), so that one row's select, merge and draw overlap another
  // CTA's loads (benchmarks/sampling_twopass.py --b64 times it by knob)
  int twopass2_min_b = 0;
  // FIB_SAMPLING_PDL (default 1; 0 turns it off): on sm_90 the sampling kernels (the cluster kernel
  // for top-k sampling calls only: sampling.cu, launch) launch with
  // programmatic stream serialization: a call's CTAs may become resident while the kernel ahead of
  // it drains, and wait there (pdl_enter(), common.cuh), instead of launching after it. H100: 0.95-1.00x
  // per call back to back (the grid), no change behind a torch kernel (sampling_pdl.py)
  bool pdl = true;
  // set when a launch with that attribute was refused (launch_pdl): this device's launches stop asking
  mutable std::atomic<bool> pdl_refused{false};
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
    // the top-k calls' instantiations: fp32 (16-bit vector maxima, 2a.), and every dtype's gathered
    // tail (calls whose every row has k > rej_min_k)
    constexpr bool summ = DT == fs::kF32;
    // (each its own static shared memory; the slice layout takes the largest, so that a row laid out
    // for one instantiation fits every other)
    for (auto* kern : {fs::sampler_kernel<DT, summ>, fs::sampler_kernel<DT, summ, true>,
                       fs::sampler_kernel<DT, summ, false, summ>}) {
      cudaFuncAttributes ak;
      check_cuda(cudaFuncGetAttributes(&ak, kern), "cudaFuncGetAttributes(top-k)");
      if (static_cast<int>(ak.sharedSizeBytes) > d.static_smem[DT]) d.static_smem[DT] = static_cast<int>(ak.sharedSizeBytes);
      check_cuda(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      d.optin - static_cast<int>(ak.sharedSizeBytes)),
                 "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, top-k)");
      check_cuda(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
                 "cudaFuncSetAttribute(NonPortableClusterSizeAllowed, top-k)");
    }
  }
  check_cuda(cudaFuncGetAttributes(&a, fs::stream_kernel<DT>), "cudaFuncGetAttributes(stream)");
  if (d.optin >= static_cast<int>(a.sharedSizeBytes + kStreamSmem)) {
    check_cuda(cudaFuncSetAttribute(fs::stream_kernel<DT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(kStreamSmem)),
               "cudaFuncSetAttribute(stream MaxDynamicSharedMemorySize)");
  } else {
    d.stream_ok = false;
  }
  check_cuda(cudaFuncSetAttribute(fs::plain_kernel<DT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  2 * fs::kHistBufBytes),
             "cudaFuncSetAttribute(plain MaxDynamicSharedMemorySize)");
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
    check_cuda(cudaFuncSetAttribute(fs::twopass_kernel<DT, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(fs::kTwoPassSmem)),
               "cudaFuncSetAttribute(twopass MaxDynamicSharedMemorySize)");
    check_cuda(cudaFuncSetAttribute(fs::twopass_kernel<DT, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(fs::kTwoPassSmem)),
               "cudaFuncSetAttribute(twopass2 MaxDynamicSharedMemorySize)");
    check_cuda(cudaFuncSetAttribute(fs::twopass_kernel<DT, 1, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(fs::kTwoPassSmem)),
               "cudaFuncSetAttribute(twopass large-k MaxDynamicSharedMemorySize)");
    check_cuda(cudaFuncSetAttribute(fs::twopass_kernel<DT, 2, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(fs::kTwoPassSmem)),
               "cudaFuncSetAttribute(twopass2 large-k MaxDynamicSharedMemorySize)");
    check_cuda(cudaFuncSetAttribute(fs::twopass_kernel<DT, 1, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(fs::kTwoPassSmem)),
               "cudaFuncSetAttribute(twopass large-k row bound MaxDynamicSharedMemorySize)");
    if (DT == fs::kF32) {
      for (int S = 1; S <= fs::kMaxCluster; ++S) {
        fs::ClusterLaunch l;
        fs::cluster_launch_config(l, S, 1, fs::kTwoPassSmem, nullptr);
        int nc = 0;
        if (cudaOccupancyMaxActiveClusters(&nc, fs::twopass_kernel<DT, 1>, &l.cfg) != cudaSuccess) {
          (void)cudaGetLastError();
          nc = 0;
        }
        d.tp_clusters[S] = nc;
      }
    }
  }
}

// A boolean FIB_* value read as fib_runtime.envs reads it: 1/true/yes/on/y/t, 0/false/no/off/n/f or
// empty (any case); anything else keeps the default.
bool env_flag(const char* e, bool dflt) {
  std::string v(e);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t b = v.find_first_not_of(" \t\n\r\f\v"), t = v.find_last_not_of(" \t\n\r\f\v");
  v = b == std::string::npos ? std::string() : v.substr(b, t - b + 1);
  if (v == "1" || v == "true" || v == "yes" || v == "on" || v == "y" || v == "t") return true;
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off" || v == "n" || v == "f") return false;
  return dflt;
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
    if (const char* e = std::getenv("FIB_SAMPLING_PLAIN_MIN_B")) d.plain_min_b = std::atoi(e);
    if (const char* e = std::getenv("FIB_SAMPLING_FILTER_MIN_TOKENS")) d.filter_min_tokens = std::atof(e);
    if (const char* e = std::getenv("FIB_SAMPLING_TWOPASS_MAX_B")) d.twopass_max_b = std::atoi(e);
    if (const char* e = std::getenv("FIB_SAMPLING_TWOPASS_LARGE_K")) d.twopass_lk = env_flag(e, d.twopass_lk);
    if (const char* e = std::getenv("FIB_SAMPLING_TWOPASS_ROW_BOUND"))
      d.twopass_rb = FIB_TWOPASS_ROW_BOUND != 0 && env_flag(e, d.twopass_rb);
    if (const char* e = std::getenv("FIB_SAMPLING_TWOPASS2_MIN_B")) d.twopass2_min_b = std::atoi(e);
    if (const char* e = std::getenv("FIB_SAMPLING_PDL")) d.pdl = env_flag(e, d.pdl);
    if (const char* e = std::getenv("FIB_SAMPLING_REJECT_MIN_K")) d.rej_min_k = std::atoi(e);
    if (const char* e = std::getenv("FIB_SAMPLING_REJECT_JOINT_MIN_K")) d.rej_joint_min_k = std::atoi(e);
    if (const char* e = std::getenv("FIB_SAMPLING_GATHER_CAP")) d.gather_cap = std::atoi(e);
    if (d.gather_cap > fs::kGatherCap) d.gather_cap = fs::kGatherCap;
    if (const char* e = std::getenv("FIB_SAMPLING_GATHER_DIRECT")) d.gather_direct = env_flag(e, d.gather_direct);
    if (const char* e = std::getenv("FIB_SAMPLING_CLUSTER_PUSH_MAX_S")) d.push_max_s = std::atoi(e);
    if (const char* e = std::getenv("FIB_SAMPLING_CLUSTER_PUSH_LOGITS")) d.push_logits = env_flag(e, d.push_logits);
    prepare_kernel<fs::kF32>(d);
    prepare_kernel<fs::kBF16>(d);
    prepare_kernel<fs::kF16>(d);
    g_ready[dev].store(true, std::memory_order_release);
  }
  return g_dev[dev];
}

using fs::host::dtype_code;

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
// automatic S); 2000 the split kernel (split.cuh; the policy before sm_90 at small batches); -2 the
// one-pass plain kernel for the calls plain_call admits (plain.cuh; other calls keep their kernel;
// greedy rows of a per-row temperature run the general algorithm inside it).
enum Kind : int { kCluster = 0, kStream = 1, kFilter = 2, kSplit = 3, kPlain = 4, kTwoPass = 5, kTwoPass2 = 6 };
// Calls the plain kernel takes: sampling without top-k, top-p and min-p absent or scalars that
// filter nothing (a per-row tensor goes to the cluster kernel: its rows with a filter would run
// one CTA each in the plain kernel), temperature anything but a scalar <= 0 (greedy).
bool plain_call(const fs::Params& p) {
  if (p.mode != fs::kSample || p.has_topk) return false;
  if (p.has_topp && (p.top_p_arr || p.top_p_val < 1.0f)) return false;
  if (p.has_minp && (p.min_p_arr || p.min_p_val > 0.0f)) return false;
  return !p.is_logits || p.temp_arr || p.temp_val > 0.0f;
}
Kind kernel_kind(const DevInfo& d, const fs::Params& p, int cluster, int esize, bool allow_split = true) {
  if (p.mode != fs::kSample || !p.has_topk) {
    // H200 (benchmarks/results/sampling_plain_h200.md), plain sampling against the cluster kernel:
    // B=512 V=128256 86 vs 172 us (fp32 probs), B=128 38 vs 54; at B=64 it wins for rows up to
    // ~300 KB (V=32000 fp32 8.5 vs 14.8, V=151936 bf16 30.5 vs 34.4) and loses above (V=128256
    // fp32 35.7 vs 31.8); below B=64 the cluster kernel's CTAs per row win (B=16 V=128256 11 vs 25)
    const bool small_rows = static_cast<int64_t>(p.V) * esize <= 320 * 1024;
    const int min_b = d.plain_min_b;
    if (plain_call(p) && (cluster == -2 || (cluster == 0 && (p.B >= min_b || (small_rows && 2 * p.B >= min_b)))))
      return kPlain;
    return kCluster;
  }
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
  if ((cluster >= 4000 && cluster < 5000) || (cluster >= 6000 && cluster < 7000)) return kTwoPass2;
  if ((cluster >= 3000 && cluster < 4000) || (cluster >= 5000 && cluster < 6000)) return kTwoPass;
  if (cluster >= 1000) return kFilter;
  if (cluster < 0) return kStream;
  if (cluster > 0) return kCluster;
  // H200, 2026-12-01 (benchmarks/results/sampling_filter_probe_h200.json): the filter kernel wins
  // from ~6M fp32 tokens per call and B >= 48 (V=128256: B=64 38 vs 47 us, B=512 124 vs 170 us;
  // V=32000: from B=256), the resident-row cluster kernel below (B=1, V=128256: 18 vs 32 us);
  // 16-bit rows the same token count since their register stream (2026-12-02,
  // results/sampling_ab_reg_stream16_h200.json, bf16 k=50: V=32000 B=256 27.4 us against 47.5
  // through the streaming kernel, V=151936 B=64 33.0 vs 47.9, V=128256 B=64 30.7 vs 34.1; they
  // needed twice the tokens before). FIB_SAMPLING_FILTER_MIN_TOKENS overrides the threshold.
  const double tokens = static_cast<double>(p.B) * static_cast<double>(p.V);
  // The two-pass kernel (2026-12-03, results/sampling_twopass_h200.json, k=50 from probs): B=64
  // V=128256 20.6 us against the filter kernel's 29.2, B=128 28.1 vs 38.3, V=32000 B=128 14.1
  // against the streaming kernel's 27.8; at B=256 the filter kernel was as fast (the two-CTA build
  // below took both their places there).
  if (p.B >= 48 && p.B < d.twopass_max_b && (tokens >= d.filter_min_tokens || p.B >= d.stream_min_b))
    return d.twopass2_min_b > 0 && p.B >= d.twopass2_min_b ? kTwoPass2 : kTwoPass;
  // From 256 rows the two-pass kernel with two CTAs per SM (64 registers, 4 loads in flight per
  // thread; 2026-12-04, results/sampling_twopass_minb2_h200.json, k=50 from probs against the filter
  // kernel): V=128256 B=256 / 512 44.8 / 84.1 us against 49.5 / 94.7 (cake 48.4 / 89.2), V=32000
  // 18.6 / 34.4 against 23.4 / 43.4, k=2048 B=512 233.2 against 254.5, joint from logits B=512
  // 93.2 against 137.2. With one CTA per SM (128 registers) a row's select, merge and draw left
  // the SM's loads idle: 92.7 us at B=512.
  // (the filter kernel is no longer part of the policy: knob 1000 + S forces it)
  if (p.B >= d.twopass_max_b && p.B >= 48 && tokens >= d.filter_min_tokens) return kTwoPass2;
  return legacy;
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

// CTAs per row of the two-pass kernel: forced (cluster = 3000 + S) or automatic: the most CTAs
// per row (at most one per 32768 tokens, at most 8: the portable cluster size) for which all B
// clusters are resident at once; 1 where no S > 1 is. H200 (results/sampling_twopass_h200.json,
// B=64 k=50): V=32000 S=1 11.9 us, S=2 13.0; V=128256 S=1 21.5, S=2 20.7; V=151936 24.9 / 22.9.
int twopass_cluster(const DevInfo& d, int B, int V, int cluster) {
  int S = 1;
  if (cluster > 3000) {
    S = cluster - 3000;
  } else {
    const int s_use = (V + 32767) / 32768;
    for (int s = 2; s <= fs::kMaxCluster && s <= s_use; ++s)
      if (B <= d.tp_clusters[s]) S = s;
  }
  if (S > fs::kMaxCluster) S = fs::kMaxCluster;
  if (S < 1) S = 1;
  return S;
}

// CTAs per row of the two-pass kernel with two CTAs per SM: forced (cluster = 4000 + S; 4000: 1), or
// automatic (cluster 0): 1 from FIB_SAMPLING_TWOPASS_MAX_B rows (one CTA per row already fills the
// SMs twice), below it (FIB_SAMPLING_TWOPASS2_MIN_B) 2 #SMs / B, at most one per 16384 tokens
int twopass2_cluster(const DevInfo& d, int B, int V, int cluster) {
  int S = 1;
  if (cluster > 4000) {
    S = cluster - 4000;
  } else if (cluster == 0 && B < d.twopass_max_b && B > 0) {
    const int s_use = (V + 16383) / 16384;
    S = 2 * d.sms / B;
    if (S > s_use) S = s_use;
  }
  if (S > fs::kMaxCluster) S = fs::kMaxCluster;
  return S < 1 ? 1 : S;
}

// The two-pass kernel's large-k instantiation (twopass.cuh, LK: speculative candidates, the
// rejection tail) for calls whose every top-k row is known on the host to have k > kTpSeedMaxK: a
// scalar top_k, or a per-row tensor with the caller's min_top_k hint above it. Forced by knobs
// 5000 + S / 6000 + S (the 3000 / 4000 knobs' kernels), refused by 3000 / 4000; the automatic
// policy takes it unless FIB_SAMPLING_TWOPASS_LARGE_K=0. H100, knob 0 with the hint against the
// default instantiation (results/sampling_twopass_lk_h100.json, 2026-12-05): k >= 1024 rows at
// B >= 64 0.808x (66 times, max 1.006), k = 256 0.914x (27 times, max 1.021).
bool twopass_large_k(const DevInfo& d, const fs::Params& p, int64_t min_k, int cluster) {
  if (cluster >= 5000 && cluster < 7000) return true;
  if (cluster >= 3000 && cluster < 5000) return false;
  if (!d.twopass_lk) return false;
  return p.top_k_arr ? min_k > fs::kTpSeedMaxK : p.top_k_val > fs::kTpSeedMaxK;
}

}  // namespace
