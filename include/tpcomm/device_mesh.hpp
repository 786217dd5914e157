// DeviceMesh (torch.distributed.device_mesh): the ranks of a group laid out as an
// n-dimensional array, row-major, with named dimensions. get_group(dim) is the subgroup of the
// ranks that differ from this one only along `dim`; the subgroups are made once, when the mesh
// is built, and cached.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tpcomm/process_group.hpp"

namespace tpcomm {

class DeviceMesh {
 public:
  /// Lays the members of `group` (null: the world) out in `shape` (row-major, in group-rank
  /// order) and makes this rank's subgroup along every dimension. Every member calls it.
  /// Throws InvalidArgument when the product of `shape` is not the group size, a dimension
  /// is not positive, or `dim_names` has the wrong length or a repeated name.
  DeviceMesh(std::string device_type, std::vector<int64_t> shape,
             std::vector<std::string> dim_names = {},
             std::shared_ptr<ProcessGroup> group = nullptr);

  /// "cpu" or "cuda", as given.
  const std::string& device_type() const { return device_type_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& dim_names() const { return names_; }
  /// Global ranks, row-major (the mesh tensor of torch).
  const std::vector<int>& mesh() const { return mesh_; }

  /// This rank's subgroup along a dimension (by index or name). With no argument on a 1-D
  /// mesh: its only group (InvalidArgument on a mesh of more dimensions, as torch).
  std::shared_ptr<ProcessGroup> get_group(int dim) const;
  std::shared_ptr<ProcessGroup> get_group(const std::string& dim_name) const;
  std::shared_ptr<ProcessGroup> get_group() const;
  /// Number of ranks along a dimension; with no argument the mesh's total size.
  int64_t size(int dim) const;
  int64_t size(const std::string& dim_name) const;
  int64_t size() const;
  /// This rank's coordinate along a dimension.
  int64_t get_local_rank(int dim) const;
  int64_t get_local_rank(const std::string& dim_name) const;
  /// This rank's coordinates (empty when it is not in the mesh).
  const std::vector<int64_t>& get_coordinate() const { return coord_; }

  /// The sub-mesh over the named dimensions (in the given order) that contains this rank,
  /// e.g. mesh["dp"] or mesh.slice({"dp", "tp"}). It reuses this mesh's per-dimension groups:
  /// no communication, so any rank may slice at any time.
  DeviceMesh operator[](const std::string& dim_name) const;
  DeviceMesh slice(const std::vector<std::string>& dim_names) const;

  /// Index of a named dimension; InvalidArgument naming the known names otherwise.
  int dim_index(const std::string& dim_name) const;

 private:
  DeviceMesh() = default;
  void build_groups();

  std::string device_type_;
  std::vector<int64_t> shape_;
  std::vector<std::string> names_;
  std::vector<int> mesh_;  // global ranks, row-major
  std::vector<int64_t> coord_;
  std::shared_ptr<ProcessGroup> parent_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;  // per dimension
};

/// Builds a DeviceMesh over the world (torch's init_device_mesh); needs an initialized
/// process group whose size equals the product of `mesh_shape`.
std::shared_ptr<DeviceMesh> init_device_mesh(const std::string& device_type,
                                             const std::vector<int64_t>& mesh_shape,
                                             const std::vector<std::string>& mesh_dim_names = {});

}  // namespace tpcomm
