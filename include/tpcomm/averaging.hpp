// Model averaging (torch.distributed.algorithms.model_averaging.utils): parameters are
// averaged over a group with one coalesced all_reduce per dtype over a flat buffer, not one
// collective per tensor, and the results are written back in place.
#pragma once

#include <memory>
#include <vector>

#include "tpcomm/process_group.hpp"
#include "tpcomm/types.hpp"

namespace tpcomm {

/// A model parameter as the averaging functions see it: its data, and whether it has a
/// gradient (torch averages only parameters whose .grad is set).
struct Parameter {
  Tensor data;
  bool has_grad = true;
};

/// An optimizer's parameter group (torch's param_groups entry).
struct ParamGroup {
  std::vector<Parameter> params;
};

/// The parameters worth averaging: those with a gradient, in order.
std::vector<Tensor> get_params_to_average(const std::vector<Parameter>& params);
/// The same over every group's parameters, in order.
std::vector<Tensor> get_params_to_average(const std::vector<ParamGroup>& groups);

/// Replaces each tensor by its average over the group's ranks (null: the world). Floating
/// dtypes only (float16 and bfloat16 are averaged in float32 and rounded once); tensors of
/// one dtype share one all_reduce. Every member calls it with matching lists.
void average_parameters(const std::vector<Tensor>& params,
                        const std::shared_ptr<ProcessGroup>& group = nullptr);
/// average_parameters(get_params_to_average(...)).
void average_parameters_or_parameter_groups(const std::vector<Parameter>& params,
                                            const std::shared_ptr<ProcessGroup>& group = nullptr);
void average_parameters_or_parameter_groups(const std::vector<ParamGroup>& groups,
                                            const std::shared_ptr<ProcessGroup>& group = nullptr);

}  // namespace tpcomm
