// DeviceMesh: row-major layout of a group's ranks and one cached subgroup per dimension.
#include "tpcomm/device_mesh.hpp"

#include <algorithm>
#include <set>

#include "tpcomm/error.hpp"

namespace tpcomm {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string names_text(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s.empty() ? "none" : s;
}

// Row-major strides of `shape`.
std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * shape[i + 1];
  return st;
}

}  // namespace

DeviceMesh::DeviceMesh(std::string device_type, std::vector<int64_t> shape,
                       std::vector<std::string> dim_names, std::shared_ptr<ProcessGroup> group)
    : device_type_(std::move(device_type)), shape_(std::move(shape)), names_(std::move(dim_names)) {
  parent_ = group ? group : default_group();
  if (shape_.empty()) throw InvalidArgument("DeviceMesh: the mesh shape is empty");
  int64_t total = 1;
  for (int64_t d : shape_) {
    if (d <= 0)
      throw InvalidArgument("DeviceMesh: mesh shape " + shape_text(shape_) +
                            " has a dimension that is not positive");
    total *= d;
  }
  if (total != parent_->size())
    throw InvalidArgument("DeviceMesh: mesh shape " + shape_text(shape_) + " holds " +
                          std::to_string(total) + " ranks but group '" + parent_->name() +
                          "' has " + std::to_string(parent_->size()) +
                          "; the product of the shape must equal the group size");
  if (!names_.empty()) {
    if (names_.size() != shape_.size())
      throw InvalidArgument("DeviceMesh: " + std::to_string(names_.size()) +
                            " dimension names (" + names_text(names_) + ") for a " +
                            std::to_string(shape_.size()) + "-dimensional mesh " +
                            shape_text(shape_));
    std::set<std::string> seen;
    for (const std::string& n : names_)
      if (!seen.insert(n).second)
        throw InvalidArgument("DeviceMesh: dimension name '" + n + "' is given twice");
  }
  mesh_ = parent_->ranks();
  int me = parent_->rank();
  if (me >= 0) {
    std::vector<int64_t> st = strides_of(shape_);
    coord_.resize(shape_.size());
    int64_t rest = me;
    for (size_t d = 0; d < shape_.size(); ++d) {
      coord_[d] = rest / st[d];
      rest %= st[d];
    }
  }
  build_groups();
}

void DeviceMesh::build_groups() {
  groups_.assign(shape_.size(), nullptr);
  if (coord_.empty()) return;  // not a member: no groups
  std::vector<int64_t> st = strides_of(shape_);
  int64_t my_index = 0;
  for (size_t d = 0; d < shape_.size(); ++d) my_index += coord_[d] * st[d];
  // In dimension order on every rank: members of one subgroup create it in the same order.
  for (size_t d = 0; d < shape_.size(); ++d) {
    std::vector<int> ranks;
    int64_t base = my_index - coord_[d] * st[d];
    for (int64_t i = 0; i < shape_[d]; ++i) ranks.push_back(mesh_[base + i * st[d]]);
    groups_[d] = parent_->size() == static_cast<int>(ranks.size()) &&
                         std::equal(ranks.begin(), ranks.end(), parent_->ranks().begin())
                     ? parent_
                     : parent_->new_group(ranks);
  }
}

int DeviceMesh::dim_index(const std::string& dim_name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == dim_name) return static_cast<int>(i);
  throw InvalidArgument("DeviceMesh: no dimension named '" + dim_name + "' (the mesh has " +
                        names_text(names_) + ")");
}

std::shared_ptr<ProcessGroup> DeviceMesh::get_group(int dim) const {
  if (dim < 0 || dim >= ndim())
    throw InvalidArgument("DeviceMesh::get_group: dimension " + std::to_string(dim) +
                          " is out of range for a " + std::to_string(ndim()) +
                          "-dimensional mesh");
  if (!groups_[dim])
    throw InvalidArgument("DeviceMesh::get_group: this rank is not in the mesh");
  return groups_[dim];
}

std::shared_ptr<ProcessGroup> DeviceMesh::get_group(const std::string& dim_name) const {
  return get_group(dim_index(dim_name));
}

std::shared_ptr<ProcessGroup> DeviceMesh::get_group() const {
  if (ndim() != 1)
    throw InvalidArgument("DeviceMesh::get_group: the mesh has " + std::to_string(ndim()) +
                          " dimensions; name the dimension");
  return get_group(0);
}

int64_t DeviceMesh::size(int dim) const {
  if (dim < 0 || dim >= ndim())
    throw InvalidArgument("DeviceMesh::size: dimension " + std::to_string(dim) +
                          " is out of range for a " + std::to_string(ndim()) +
                          "-dimensional mesh");
  return shape_[dim];
}

int64_t DeviceMesh::size(const std::string& dim_name) const { return size(dim_index(dim_name)); }

int64_t DeviceMesh::size() const { return static_cast<int64_t>(mesh_.size()); }

int64_t DeviceMesh::get_local_rank(int dim) const {
  size(dim);  // range check
  if (coord_.empty())
    throw InvalidArgument("DeviceMesh::get_local_rank: this rank is not in the mesh");
  return coord_[dim];
}

int64_t DeviceMesh::get_local_rank(const std::string& dim_name) const {
  return get_local_rank(dim_index(dim_name));
}

DeviceMesh DeviceMesh::operator[](const std::string& dim_name) const { return slice({dim_name}); }

DeviceMesh DeviceMesh::slice(const std::vector<std::string>& dim_names) const {
  if (dim_names.empty()) throw InvalidArgument("DeviceMesh::slice: no dimension named");
  if (coord_.empty()) throw InvalidArgument("DeviceMesh::slice: this rank is not in the mesh");
  std::vector<int> dims;
  for (const std::string& n : dim_names) {
    int d = dim_index(n);
    if (std::find(dims.begin(), dims.end(), d) != dims.end())
      throw InvalidArgument("DeviceMesh::slice: dimension '" + n + "' is named twice");
    dims.push_back(d);
  }
  std::vector<int64_t> st = strides_of(shape_);
  int64_t base = 0;  // this rank's index with the sliced coordinates at 0
  for (int d = 0; d < ndim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) base += coord_[d] * st[d];
  DeviceMesh sub;
  sub.device_type_ = device_type_;
  sub.names_ = dim_names;
  for (int d : dims) sub.shape_.push_back(shape_[d]);
  std::vector<int64_t> sub_st = strides_of(sub.shape_);
  int64_t count = 1;
  for (int64_t s : sub.shape_) count *= s;
  sub.mesh_.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t idx = base, rest = i;
    for (size_t k = 0; k < dims.size(); ++k) {
      idx += (rest / sub_st[k]) * st[dims[k]];
      rest %= sub_st[k];
    }
    sub.mesh_[i] = mesh_[idx];
  }
  for (int d : dims) sub.coord_.push_back(coord_[d]);
  // Groups: a sliced dimension's group is the same set of ranks as in the full mesh.
  sub.parent_ = parent_;
  sub.groups_.clear();
  for (int d : dims) sub.groups_.push_back(groups_[d]);
  return sub;
}

std::shared_ptr<DeviceMesh> init_device_mesh(const std::string& device_type,
                                             const std::vector<int64_t>& mesh_shape,
                                             const std::vector<std::string>& mesh_dim_names) {
  if (!is_initialized())
    throw InvalidArgument("init_device_mesh: call init_process_group first");
  if (device_type != "cpu" && device_type != "cuda")
    throw InvalidArgument("init_device_mesh: device type '" + device_type +
                          "' is not supported (use 'cpu' or 'cuda')");
  return std::make_shared<DeviceMesh>(device_type, mesh_shape, mesh_dim_names);
}

}  // namespace tpcomm
