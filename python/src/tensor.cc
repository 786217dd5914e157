// Arrays to tpcomm::Tensor views: DLPack or the buffer protocol through nanobind's ndarray,
// never converting (no copy); or a raw pointer wrapped in tpcomm._C.Tensor (tpcomm.torch).
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <string>

#include "common.h"

namespace tpcomm::py {
namespace {

[[noreturn]] void invalid(const std::string& msg) { throw InvalidArgument(msg); }

std::string tname(nb::handle h) {
  nb::handle t = h.type();
  std::string mod =
      nb::hasattr(t, "__module__") ? nb::cast<std::string>(nb::str(t.attr("__module__"))) : "";
  std::string name = nb::type_name(t).c_str();
  return mod.empty() || mod == "builtins" || name.find('.') != std::string::npos ? name
                                                                                 : mod + "." + name;
}

std::string dl_name(nb::dlpack::dtype t) {
  static const char* codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  std::string c = t.code < 7 ? codes[t.code] : "code" + std::to_string(t.code);
  return c + std::to_string(t.bits) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

std::optional<DType> from_dl(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes != 1) return std::nullopt;
  switch (static_cast<C>(t.code)) {
    case C::Bool:
      if (t.bits == 8) return DType::Bool;
      break;
    case C::UInt:
      if (t.bits == 8) return DType::UInt8;
      break;
    case C::Int:
      if (t.bits == 8) return DType::Int8;
      if (t.bits == 16) return DType::Int16;
      if (t.bits == 32) return DType::Int32;
      if (t.bits == 64) return DType::Int64;
      break;
    case C::Float:
      if (t.bits == 16) return DType::Float16;
      if (t.bits == 32) return DType::Float32;
      if (t.bits == 64) return DType::Float64;
      break;
    case C::Bfloat:
      if (t.bits == 16) return DType::BFloat16;
      break;
    default:
      break;
  }
  return std::nullopt;
}

template <class Array>
Tensor view_of(const Array& a, nb::handle obj, const char* what) {
  auto dt = from_dl(a.dtype());
  if (!dt)
    invalid(std::string(what) + ": dtype " + dl_name(a.dtype()) + " of " + tname(obj) +
            " is not one tpcomm moves (bool, uint8, int8, int16, int32, int64, float16, "
            "bfloat16, float32, float64)");
  // C-contiguous: each stride (in elements) is the product of the later extents; extents of
  // 1 have any stride.
  int64_t expect = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    int64_t n = static_cast<int64_t>(a.shape(i));
    if (n == 0) {
      expect = 0;
      break;
    }
    if (n != 1 && a.stride(i) != expect)
      invalid(std::string(what) + ": the " + tname(obj) +
              " is not contiguous (tpcomm uses memory in place: pass a contiguous array, "
              "e.g. numpy.ascontiguousarray(x) or x.contiguous(), and use the result)");
    expect *= n;
  }
  Tensor t;
  t.data = static_cast<char*>(a.data_handle()) + a.byte_offset();
  t.numel = static_cast<int64_t>(a.size());
  t.dtype = *dt;
  switch (a.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:
      t.device = Device::cpu();
      break;
    case nb::device::cuda::value:
      t.device = Device::cuda(a.device_id());
      break;
    default:
      invalid(std::string(what) + ": the " + tname(obj) + " lives on DLPack device type " +
              std::to_string(a.device_type()) + "; tpcomm takes host (cpu) and CUDA memory");
  }
  return t;
}

}  // namespace

Tensor to_tensor(nb::handle obj, bool writable, const char* what) {
  if (nb::isinstance<Tensor>(obj)) return nb::cast<Tensor>(obj);
  {
    nb::ndarray<> a;
    if (nb::try_cast(obj, a, false)) return view_of(a, obj, what);
  }
  nb::ndarray<nb::ro> r;
  if (nb::try_cast(obj, r, false)) {
    if (writable)
      invalid(std::string(what) + ": the " + tname(obj) +
              " is read-only, and this operation writes its result into it");
    return view_of(r, obj, what);
  }
  std::string hint;
  if (nb::hasattr(obj, "requires_grad") && nb::cast<bool>(obj.attr("requires_grad")))
    hint = " (a tensor that requires grad: pass tensor.detach())";
  invalid(std::string(what) +
          ": expected an array (DLPack or buffer protocol: numpy, torch, "
          "...), got " +
          tname(obj) + hint);
}

std::vector<Tensor> to_tensors(nb::handle seq, bool writable, const char* what) {
  std::vector<Tensor> out;
  if (seq.is_none()) return out;
  if (!nb::isinstance<nb::sequence>(seq))
    invalid(std::string(what) + ": expected a list of arrays, got " + tname(seq));
  size_t n = nb::len(seq);
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string w = std::string(what) + "[" + std::to_string(i) + "]";
    out.push_back(to_tensor(seq[i], writable, w.c_str()));
  }
  return out;
}

void bind_tensor(nb::module_& m) {
  nb::enum_<DType>(m, "DType")
      .value("bool", DType::Bool)
      .value("uint8", DType::UInt8)
      .value("int8", DType::Int8)
      .value("int16", DType::Int16)
      .value("int32", DType::Int32)
      .value("int64", DType::Int64)
      .value("float16", DType::Float16)
      .value("bfloat16", DType::BFloat16)
      .value("float32", DType::Float32)
      .value("float64", DType::Float64);
  // A raw view (address, element count, dtype) for callers that hold the memory themselves
  // (tpcomm.torch passes tensor.data_ptr()); the caller keeps the memory alive.
  nb::class_<Tensor>(m, "Tensor")
      .def(
          "__init__",
          [](Tensor* t, uintptr_t data, int64_t numel, DType dtype, bool cuda, int index) {
            if (numel < 0) invalid("Tensor: numel must be >= 0, got " + std::to_string(numel));
            new (t) Tensor{reinterpret_cast<void*>(data), numel, dtype,
                           cuda ? Device::cuda(index) : Device::cpu()};
          },
          nb::arg("data"), nb::arg("numel"), nb::arg("dtype"), nb::arg("cuda") = false,
          nb::arg("index") = 0)
      .def_prop_ro("data", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data); })
      .def_ro("numel", &Tensor::numel)
      .def_ro("dtype", &Tensor::dtype)
      .def("__repr__", [](const Tensor& t) { return t.str(); });
  m.def(
      "_view",
      [](nb::handle obj, bool writable) {
        Tensor t = to_tensor(obj, writable, "tensor");
        return nb::make_tuple(reinterpret_cast<uintptr_t>(t.data), t.numel, t.dtype);
      },
      nb::arg("obj"), nb::arg("writable") = true, "(address, numel, dtype) of an array's view");
}

}  // namespace tpcomm::py
