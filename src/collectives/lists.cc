// List forms of the gathering and scattering collectives: validate the list, stage it
// through one contiguous buffer (or use it directly when it already is one), run the tensor
// form.
#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "collectives/util.h"
#include "collectives/validate.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll {

namespace {

// Checks a list of `n` tensors like `ref` (dtype and element count).
void check_list(const std::vector<Tensor>& list, const char* what, int n, const Tensor& ref,
                const char* ref_name, const char* op, int rank) {
  if (list.size() != static_cast<size_t>(n)) {
    throw InvalidArgument(std::string(op) + " (rank " + std::to_string(rank) + "): " + what +
                          " has " + std::to_string(list.size()) + " tensors but the group has " +
                          std::to_string(n) + " ranks; pass one tensor per rank");
  }
  for (size_t i = 0; i < list.size(); ++i) {
    std::string name = std::string(what) + "[" + std::to_string(i) + "]";
    check::tensor(list[i], op, name.c_str(), rank);
    check::same_dtype(ref, ref_name, list[i], name.c_str(), op, rank);
    check::numel(list[i], name.c_str(), ref.numel, std::string("the ") + ref_name + "'s", op, rank);
  }
}

// True when the tensors lie back to back in order (then list[0].data is the whole buffer).
bool contiguous(const std::vector<Tensor>& list) {
  for (size_t i = 1; i < list.size(); ++i) {
    if (list[i].data != at(list[0].data, i * list[0].nbytes())) return false;
  }
  return true;
}

Tensor whole(const std::vector<Tensor>& list, void* data) {
  return Tensor::raw(data, list.empty() ? 0 : list[0].numel * static_cast<int64_t>(list.size()),
                     list.empty() ? DType::Float32 : list[0].dtype);
}

void copy_out(const std::vector<Tensor>& list, const uint8_t* buf) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].nbytes() > 0)
      std::memcpy(list[i].data, buf + i * list[i].nbytes(), list[i].nbytes());
  }
}

void copy_in(const std::vector<Tensor>& list, uint8_t* buf) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].nbytes() > 0)
      std::memcpy(buf + i * list[i].nbytes(), list[i].data, list[i].nbytes());
  }
}

}  // namespace

const AlgoInfo& all_gather_list(CollComm& comm, const Tensor& input,
                                const std::vector<Tensor>& outputs, const CommonOptions& options) {
  const int r = comm.rank(), n = comm.size();
  check::tensor(input, "all_gather", "input", r);
  check_list(outputs, "output list", n, input, "input", "all_gather", r);
  if (contiguous(outputs)) {
    return all_gather(comm, {input, whole(outputs, outputs[0].data), options});
  }
  Scratch buf(input.nbytes() * static_cast<size_t>(n));
  const AlgoInfo& algo = all_gather(comm, {input, whole(outputs, buf.data()), options});
  copy_out(outputs, buf.data());
  return algo;
}

const AlgoInfo& gather_list(CollComm& comm, const Tensor& input, const std::vector<Tensor>& outputs,
                            int root, const CommonOptions& options) {
  const int r = comm.rank(), n = comm.size();
  check::root(root, n, "gather", r);
  check::tensor(input, "gather", "input", r);
  if (r != root) return gather(comm, {input, Tensor{}, root, options});
  check_list(outputs, "gather list", n, input, "input", "gather", r);
  if (contiguous(outputs))
    return gather(comm, {input, whole(outputs, outputs[0].data), root, options});
  Scratch buf(input.nbytes() * static_cast<size_t>(n));
  const AlgoInfo& algo = gather(comm, {input, whole(outputs, buf.data()), root, options});
  copy_out(outputs, buf.data());
  return algo;
}

const AlgoInfo& scatter_list(CollComm& comm, const std::vector<Tensor>& inputs,
                             const Tensor& output, int root, const CommonOptions& options) {
  const int r = comm.rank(), n = comm.size();
  check::root(root, n, "scatter", r);
  check::tensor(output, "scatter", "output", r);
  if (r != root) return scatter(comm, {Tensor{}, output, root, options});
  check_list(inputs, "scatter list", n, output, "output", "scatter", r);
  if (contiguous(inputs))
    return scatter(comm, {whole(inputs, inputs[0].data), output, root, options});
  Scratch buf(output.nbytes() * static_cast<size_t>(n));
  copy_in(inputs, buf.data());
  return scatter(comm, {whole(inputs, buf.data()), output, root, options});
}

const AlgoInfo& reduce_scatter_list(CollComm& comm, const std::vector<Tensor>& inputs,
                                    const Tensor& output, ReduceOp op, double premul_scale,
                                    const CommonOptions& options) {
  const int r = comm.rank(), n = comm.size();
  check::tensor(output, "reduce_scatter", "output", r);
  check_list(inputs, "input list", n, output, "output", "reduce_scatter", r);
  if (contiguous(inputs)) {
    return reduce_scatter(comm, {whole(inputs, inputs[0].data), output, op, premul_scale, options});
  }
  Scratch buf(output.nbytes() * static_cast<size_t>(n));
  copy_in(inputs, buf.data());
  return reduce_scatter(comm, {whole(inputs, buf.data()), output, op, premul_scale, options});
}

const AlgoInfo& all_to_all_list(CollComm& comm, const std::vector<Tensor>& inputs,
                                const std::vector<Tensor>& outputs, const CommonOptions& options) {
  const int r = comm.rank(), n = comm.size();
  const char* op = "all_to_all";
  for (const auto* list : {&inputs, &outputs}) {
    const char* what = list == &inputs ? "input list" : "output list";
    if (list->size() != static_cast<size_t>(n)) {
      throw InvalidArgument(std::string(op) + " (rank " + std::to_string(r) + "): " + what +
                            " has " + std::to_string(list->size()) + " tensors but the group has " +
                            std::to_string(n) + " ranks; pass one tensor per rank");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      std::string name = std::string(what) + "[" + std::to_string(i) + "]";
      check::tensor((*list)[i], op, name.c_str(), r);
      check::same_dtype(inputs[0], "input list[0]", (*list)[i], name.c_str(), op, r);
    }
  }
  AllToAllArgs a;
  a.options = options;
  size_t in_bytes = 0, out_bytes = 0;
  for (int i = 0; i < n; ++i) {
    a.input_splits.push_back(inputs[static_cast<size_t>(i)].numel);
    a.output_splits.push_back(outputs[static_cast<size_t>(i)].numel);
    in_bytes += inputs[static_cast<size_t>(i)].nbytes();
    out_bytes += outputs[static_cast<size_t>(i)].nbytes();
  }
  Scratch in(in_bytes), out(out_bytes);
  size_t off = 0;
  for (const Tensor& t : inputs) {
    if (t.nbytes() > 0) std::memcpy(in.data() + off, t.data, t.nbytes());
    off += t.nbytes();
  }
  const DType dt = inputs[0].dtype;
  const size_t es = dtype_size(dt);
  a.input = Tensor::raw(in.data(), static_cast<int64_t>(in_bytes / es), dt);
  a.output = Tensor::raw(out.data(), static_cast<int64_t>(out_bytes / es), dt);
  const AlgoInfo& algo = all_to_all(comm, a);
  off = 0;
  for (const Tensor& t : outputs) {
    if (t.nbytes() > 0) std::memcpy(t.data, out.data() + off, t.nbytes());
    off += t.nbytes();
  }
  return algo;
}

}  // namespace tpcomm::coll
