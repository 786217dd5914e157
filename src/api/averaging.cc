// Model averaging: tensors grouped by dtype, packed into one flat buffer per dtype, one AVG
// all_reduce each, unpacked in place.
#include "tpcomm/averaging.hpp"

#include <cstring>
#include <map>

#include "tpcomm/collectives.hpp"
#include "tpcomm/error.hpp"

namespace tpcomm {

std::vector<Tensor> get_params_to_average(const std::vector<Parameter>& params) {
  std::vector<Tensor> out;
  for (const Parameter& p : params)
    if (p.has_grad) out.push_back(p.data);
  return out;
}

std::vector<Tensor> get_params_to_average(const std::vector<ParamGroup>& groups) {
  std::vector<Tensor> out;
  for (const ParamGroup& g : groups)
    for (const Parameter& p : g.params)
      if (p.has_grad) out.push_back(p.data);
  return out;
}

void average_parameters(const std::vector<Tensor>& params,
                        const std::shared_ptr<ProcessGroup>& group) {
  std::map<DType, std::vector<size_t>> by_dtype;  // ordered: every rank runs them alike
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = params[i];
    if (!reduce_op_supports(ReduceOp::AVG, t.dtype))
      throw InvalidArgument("average_parameters: parameter " + std::to_string(i) + " is " +
                            t.str() + "; only floating-point parameters can be averaged");
    if (t.device.type != DeviceType::CPU)
      throw InvalidArgument("average_parameters: parameter " + std::to_string(i) + " is " +
                            t.str() + "; only host memory is supported by this build");
    if (t.numel > 0 && !t.data)
      throw InvalidArgument("average_parameters: parameter " + std::to_string(i) +
                            " has no data");
    by_dtype[t.dtype].push_back(i);
  }
  for (auto& [dtype, idx] : by_dtype) {
    size_t total = 0;
    for (size_t i : idx) total += params[i].nbytes();
    if (total == 0) continue;
    if (idx.size() == 1) {  // nothing to pack
      all_reduce(params[idx[0]], ReduceOp::AVG, group);
      continue;
    }
    std::vector<uint8_t> flat(total);
    size_t off = 0;
    for (size_t i : idx) {
      if (params[i].nbytes()) std::memcpy(flat.data() + off, params[i].data, params[i].nbytes());
      off += params[i].nbytes();
    }
    size_t es = dtype_size(dtype);
    all_reduce(Tensor::raw(flat.data(), static_cast<int64_t>(total / es), dtype), ReduceOp::AVG,
               group);
    off = 0;
    for (size_t i : idx) {
      if (params[i].nbytes()) std::memcpy(params[i].data, flat.data() + off, params[i].nbytes());
      off += params[i].nbytes();
    }
  }
}

void average_parameters_or_parameter_groups(const std::vector<Parameter>& params,
                                            const std::shared_ptr<ProcessGroup>& group) {
  average_parameters(get_params_to_average(params), group);
}

void average_parameters_or_parameter_groups(const std::vector<ParamGroup>& groups,
                                            const std::shared_ptr<ProcessGroup>& group) {
  average_parameters(get_params_to_average(groups), group);
}

}  // namespace tpcomm
