// Host side of the sampling family: reading and checking the arguments of `sample` into Params.
//
// One call passes the input, the output, a flags word and six per-row parameters as they came from
// Python: None, a number or a tensor (tvm-ffi AnyView), so the Python wrapper does no per-argument
// work on its fast path. Anything this reader cannot take as it is (a tensor of another dtype, a
// strided parameter tensor, a numpy scalar, a float top_k) raises TypeError/ValueError before any
// launch; the wrapper then converts the arguments and calls once more.
#pragma once

#include <tvm/ffi/any.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>

#include <cstdint>
#include <optional>
#include <string>

#include "fib/sampling/sampler.cuh"

namespace fib {
namespace sampling {
namespace host {

using tvm::ffi::AnyView;
using tvm::ffi::TensorView;

// flags: bits 0-1 the mode (kSample, kRenormProbs, kMaskLogits), bit 2 logits input, bit 3 the
// joint filter order; bits 16-46 the caller's min_top_k hint (0: none), a bound it knows every
// row's top_k to reach, which picks a kernel and never changes which rows are filtered
// (fib_runtime/kernels/sampling.py builds the same word)
constexpr int64_t kFlagModeMask = 3, kFlagLogits = 4, kFlagJoint = 8;
constexpr int kFlagMinKShift = 16;
inline int64_t min_k_hint(int64_t flags) { return (flags >> kFlagMinKShift) & 0x7fffffff; }

inline int dtype_code(DLDataType t) {
  if (t.lanes != 1) return -1;
  if (t.code == kDLFloat && t.bits == 32) return kF32;
  if (t.code == kDLBfloat && t.bits == 16) return kBF16;
  if (t.code == kDLFloat && t.bits == 16) return kF16;
  return -1;
}

inline const void* tensor_ptr(const TensorView& t) {
  return static_cast<const char*>(t.data_ptr()) + t.byte_offset();
}

// need_cuda: the tensor must be a CUDA tensor on `dev` (false only for describe_args on the CPU)
inline void check_device(const TensorView& t, const DLDevice& dev, bool need_cuda, const char* name) {
  if (need_cuda && t.device().device_type != kDLCUDA)
    TVM_FFI_THROW(ValueError) << "fib sampling: " << name << " must be a CUDA tensor";
  if (t.device().device_type != dev.device_type || t.device().device_id != dev.device_id)
    TVM_FFI_THROW(ValueError) << "fib sampling: " << name << " must be on the input's device";
}

enum ArgKind : int { kArgTopK = 0, kArgFloat = 1, kArgRng = 2 };

// One per-row parameter: absent, a scalar (i / f), or a tensor of `n` entries (0-d counts as 1).
struct Arg {
  const void* ptr = nullptr;
  int64_t n = 0;
  bool is64 = false, scalar = false;
  int64_t i = 0;
  double f = 0.0;
};

// top_k: int32/int64 tensors or an int; top_p/min_p/temperature: float32 tensors or a number;
// seed/offset: int64 tensors or an int. A float where an int belongs is a TypeError (the wrapper
// applies Python's int() and calls again).
inline Arg read_arg(const AnyView& a, const char* name, ArgKind kind, const DLDevice& dev, bool need_cuda) {
  Arg r;
  switch (a.type_index()) {
    case tvm::ffi::TypeIndex::kTVMFFINone:
      return r;
    case tvm::ffi::TypeIndex::kTVMFFIBool:
    case tvm::ffi::TypeIndex::kTVMFFIInt:
      r.scalar = true;
      r.i = a.type_index() == tvm::ffi::TypeIndex::kTVMFFIBool ? static_cast<int64_t>(a.cast<bool>()) : a.cast<int64_t>();
      r.f = static_cast<double>(r.i);
      return r;
    case tvm::ffi::TypeIndex::kTVMFFIFloat:
      if (kind != kArgFloat) TVM_FFI_THROW(TypeError) << "fib sampling: " << name << " must be an integer";
      r.scalar = true;
      r.f = a.cast<double>();
      return r;
    default:
      break;
  }
  std::optional<TensorView> tv = a.try_cast<TensorView>();
  if (!tv.has_value()) TVM_FFI_THROW(TypeError) << "fib sampling: " << name << " must be None, a number or a tensor";
  const TensorView& t = *tv;
  if (t.ndim() > 1) TVM_FFI_THROW(ValueError) << "fib sampling: " << name << " must be a 0-d or 1-D tensor";
  r.n = t.ndim() == 0 ? 1 : t.size(0);
  if (r.n > 1 && t.stride(0) != 1) TVM_FFI_THROW(ValueError) << "fib sampling: " << name << " must be contiguous";
  const DLDataType dt = t.dtype();
  const bool ok = dt.lanes == 1 && (kind == kArgFloat  ? (dt.code == kDLFloat && dt.bits == 32)
                                    : kind == kArgRng ? (dt.code == kDLInt && dt.bits == 64)
                                                      : (dt.code == kDLInt && (dt.bits == 32 || dt.bits == 64)));
  if (!ok) {
    TVM_FFI_THROW(TypeError) << "fib sampling: " << name << " must be "
                             << (kind == kArgFloat ? "float32" : kind == kArgRng ? "int64" : "int32/int64");
  }
  check_device(t, dev, need_cuda, name);
  r.ptr = tensor_ptr(t);
  r.is64 = dt.bits == 64;
  return r;
}

// Params (and the input's dtype code) of one call; p.B == 0: nothing to do.
struct Call {
  Params p = {};
  int dt = 0;
  DLDevice dev = {};
};

inline Call read_call(const TensorView& input, const TensorView& out, int64_t flags, const AnyView& top_k,
                      const AnyView& top_p, const AnyView& min_p, const AnyView& temperature, const AnyView& seed,
                      const AnyView& offset, bool need_cuda) {
  Call c;
  Params& p = c.p;
  const int mode = static_cast<int>(flags & kFlagModeMask);
  const bool is_logits = (flags & kFlagLogits) != 0;
  if (mode != kSample && mode != kRenormProbs && mode != kMaskLogits)
    TVM_FFI_THROW(ValueError) << "fib sampling: bad mode " << mode;
  // a 1-D input is one row
  if (input.ndim() != 2 && input.ndim() != 1) TVM_FFI_THROW(ValueError) << "fib sampling: input must be [B, V] or [V]";
  c.dev = input.device();
  if (need_cuda && c.dev.device_type != kDLCUDA) TVM_FFI_THROW(ValueError) << "fib sampling: input must be a CUDA tensor";
  c.dt = dtype_code(input.dtype());
  if (c.dt < 0) TVM_FFI_THROW(TypeError) << "fib sampling: input dtype must be float32, bfloat16 or float16";
  if (!is_logits && c.dt != kF32) TVM_FFI_THROW(TypeError) << "fib sampling: probs must be float32";
  const bool one_row = input.ndim() == 1;
  const int64_t B64 = one_row ? 1 : input.size(0), V64 = input.size(input.ndim() - 1);
  if (B64 == 0) return c;
  if (V64 < 1 || V64 > (int64_t(1) << 30)) TVM_FFI_THROW(ValueError) << "fib sampling: bad vocabulary size " << V64;
  if (B64 > 65535) TVM_FFI_THROW(ValueError) << "fib sampling: at most 65535 rows per call";
  if (input.stride(input.ndim() - 1) != 1)
    TVM_FFI_THROW(ValueError) << "fib sampling: rows must be contiguous (stride(-1) == 1)";
  const int B = static_cast<int>(B64), V = static_cast<int>(V64);
  p.in = tensor_ptr(input);
  p.in_stride = one_row ? V64 : input.stride(0);
  p.B = B;
  p.V = V;
  p.is_logits = is_logits ? 1 : 0;
  p.mode = mode;
  p.joint = (flags & kFlagJoint) ? 1 : 0;
  check_device(out, c.dev, need_cuda, "out");
  if (mode == kSample) {
    // [B] (or 0-d / [1] for one row), int64, contiguous
    const bool shape_ok = out.ndim() == 0 ? B == 1 : (out.ndim() == 1 && out.size(0) == B && (B == 1 || out.stride(0) == 1));
    if (!shape_ok || out.dtype().code != kDLInt || out.dtype().bits != 64 || out.dtype().lanes != 1)
      TVM_FFI_THROW(ValueError) << "fib sampling: out must be a contiguous int64 [B] tensor";
    p.out_idx = static_cast<int64_t*>(const_cast<void*>(tensor_ptr(out)));
  } else {
    // the input's shape, rows contiguous; float32 (renorm) or the input dtype (mask)
    const int odt = dtype_code(out.dtype());
    bool shape_ok = out.ndim() == input.ndim() && out.size(out.ndim() - 1) == V && out.stride(out.ndim() - 1) == 1;
    if (shape_ok && !one_row) shape_ok = out.size(0) == B;
    if (!shape_ok || odt != (mode == kRenormProbs ? static_cast<int>(kF32) : c.dt))
      TVM_FFI_THROW(ValueError) << "fib sampling: out must have the input's shape, rows contiguous, "
                                << (mode == kRenormProbs ? "float32" : "the input dtype");
    p.out_vals = const_cast<void*>(tensor_ptr(out));
    p.out_stride = one_row ? V64 : out.stride(0);
  }
  const Arg k = read_arg(top_k, "top_k", kArgTopK, c.dev, need_cuda);
  const Arg tp = read_arg(top_p, "top_p", kArgFloat, c.dev, need_cuda);
  const Arg mp = read_arg(min_p, "min_p", kArgFloat, c.dev, need_cuda);
  const Arg tt = read_arg(temperature, "temperature", kArgFloat, c.dev, need_cuda);
  const Arg sd = read_arg(seed, "seed", kArgRng, c.dev, need_cuda);
  const Arg of = read_arg(offset, "offset", kArgRng, c.dev, need_cuda);
  // per-row filters: B entries; seed/offset: 1 or B
  for (const Arg* a : {&k, &tp, &mp, &tt}) {
    if (a->ptr && a->n != B)
      TVM_FFI_THROW(ValueError) << "fib sampling: top_k/top_p/min_p/temperature tensors must have B (" << B
                                << ") entries";
  }
  for (const Arg* a : {&sd, &of}) {
    if (a->ptr && a->n != B && a->n != 1)
      TVM_FFI_THROW(ValueError) << "fib sampling: seed/offset tensors must have 1 or B (" << B << ") entries";
  }
  p.top_k_arr = k.ptr;
  p.top_k_is64 = k.ptr && k.is64;
  const int64_t kv = k.scalar ? k.i : 0;
  p.top_k_val = kv > 0x7fffffff ? 0x7fffffff : static_cast<int>(kv < 0 ? 0 : kv);
  p.has_topk = k.ptr || (kv > 0 && kv < V);
  const double tpv = tp.scalar ? tp.f : 1.0;
  p.top_p_arr = static_cast<const float*>(tp.ptr);
  p.top_p_val = static_cast<float>(tpv);
  p.has_topp = tp.ptr || tpv < 1.0;
  const double mpv = mp.scalar ? mp.f : 0.0;
  p.min_p_arr = static_cast<const float*>(mp.ptr);
  p.min_p_val = static_cast<float>(mpv);
  p.has_minp = mp.ptr || mpv > 0.0;
  p.temp_arr = static_cast<const float*>(tt.ptr);
  p.temp_val = static_cast<float>(tt.scalar ? tt.f : 1.0);
  p.seed_arr = static_cast<const int64_t*>(sd.ptr);
  p.offset_arr = static_cast<const int64_t*>(of.ptr);
  p.seed_val = sd.scalar ? sd.i : 0;
  p.offset_val = of.scalar ? of.i : 0;
  p.seed_per_row = sd.ptr && sd.n > 1;
  p.offset_per_row = of.ptr && of.n > 1;
  return c;
}

// The Params of a call as "key=value,..." (pointers as integers): describe_args, for tests.
inline std::string describe(const Call& c) {
  const Params& p = c.p;
  auto ptr = [](const void* q) { return std::to_string(reinterpret_cast<uintptr_t>(q)); };
  std::string s = "B=" + std::to_string(p.B) + ",V=" + std::to_string(p.V) + ",dt=" + std::to_string(c.dt);
  s += ",mode=" + std::to_string(p.mode) + ",is_logits=" + std::to_string(p.is_logits) +
       ",joint=" + std::to_string(p.joint) + ",in=" + ptr(p.in) + ",in_stride=" + std::to_string(p.in_stride);
  s += ",out_idx=" + ptr(p.out_idx) + ",out_vals=" + ptr(p.out_vals) + ",out_stride=" + std::to_string(p.out_stride);
  s += ",top_k_arr=" + ptr(p.top_k_arr) + ",top_k_is64=" + std::to_string(p.top_k_is64) +
       ",top_k_val=" + std::to_string(p.top_k_val) + ",has_topk=" + std::to_string(p.has_topk);
  s += ",top_p_arr=" + ptr(p.top_p_arr) + ",top_p_val=" + std::to_string(p.top_p_val) +
       ",has_topp=" + std::to_string(p.has_topp);
  s += ",min_p_arr=" + ptr(p.min_p_arr) + ",min_p_val=" + std::to_string(p.min_p_val) +
       ",has_minp=" + std::to_string(p.has_minp);
  s += ",temp_arr=" + ptr(p.temp_arr) + ",temp_val=" + std::to_string(p.temp_val);
  s += ",seed_arr=" + ptr(p.seed_arr) + ",seed_val=" + std::to_string(p.seed_val) +
       ",seed_per_row=" + std::to_string(p.seed_per_row);
  s += ",offset_arr=" + ptr(p.offset_arr) + ",offset_val=" + std::to_string(p.offset_val) +
       ",offset_per_row=" + std::to_string(p.offset_per_row);
  return s;
}

}  // namespace host
}  // namespace sampling
}  // namespace fib
