// Object collectives: sizes first (one small collective), then one payload collective over a
// buffer padded to the largest object (all_gather, gather, scatter) or concatenated
// (broadcast, send/recv).
#include "tpcomm/objects.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "tpcomm/collectives.hpp"

namespace tpcomm {

namespace {

// Tags of send_object_list / recv_object_list (user tags are small; these stay clear of them).
constexpr int kTagCount = 0x6f626a00;
constexpr int kTagSizes = kTagCount + 1;
constexpr int kTagPayload = kTagCount + 2;

std::shared_ptr<ProcessGroup> resolve(const std::shared_ptr<ProcessGroup>& g) {
  return g ? g : default_group();
}

void check_member(const ProcessGroup& pg, const char* what) {
  if (!pg.is_member())
    throw InvalidArgument(std::string(what) + ": this rank is not a member of group '" +
                          pg.name() + "'");
}

int64_t max_of(const std::vector<int64_t>& v) {
  int64_t m = 0;
  for (int64_t x : v) m = std::max(m, x);
  return m;
}

// Every member's size, in group-rank order.
std::vector<int64_t> gather_sizes(int64_t mine, const std::shared_ptr<ProcessGroup>& pg) {
  std::vector<int64_t> sizes(pg->size());
  all_gather_into_tensor(Tensor::of(sizes), Tensor::of(&mine, 1), pg);
  return sizes;
}

}  // namespace

void broadcast_object_list(std::vector<Object>& object_list, int src,
                           const std::shared_ptr<ProcessGroup>& group) {
  auto pg = resolve(group);
  check_member(*pg, "broadcast_object_list");
  bool root = pg->global_rank(pg->rank()) == src;
  int64_t count = root ? static_cast<int64_t>(object_list.size()) : 0;
  broadcast(Tensor::of(&count, 1), src, pg);
  if (count < 0 || count > (int64_t{1} << 32))
    throw MismatchError("broadcast_object_list: rank " + std::to_string(src) +
                        " announced " + std::to_string(count) + " objects");
  std::vector<int64_t> sizes(count);
  if (root)
    for (int64_t i = 0; i < count; ++i) sizes[i] = static_cast<int64_t>(object_list[i].size());
  if (count > 0) broadcast(Tensor::of(sizes), src, pg);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::vector<uint8_t> payload(total);
  if (root) {
    size_t off = 0;
    for (const Object& o : object_list) {
      if (!o.empty()) std::memcpy(payload.data() + off, o.data(), o.size());
      off += o.size();
    }
  }
  if (total > 0) broadcast(Tensor::of(payload), src, pg);
  if (root) return;
  object_list.assign(count, {});
  size_t off = 0;
  for (int64_t i = 0; i < count; ++i) {
    object_list[i].assign(payload.begin() + off, payload.begin() + off + sizes[i]);
    off += sizes[i];
  }
}

void all_gather_object(std::vector<Object>& object_list, const Object& obj,
                       const std::shared_ptr<ProcessGroup>& group) {
  auto pg = resolve(group);
  check_member(*pg, "all_gather_object");
  int n = pg->size();
  std::vector<int64_t> sizes = gather_sizes(static_cast<int64_t>(obj.size()), pg);
  int64_t max = max_of(sizes);
  std::vector<uint8_t> mine(max, 0), all(static_cast<size_t>(max) * n);
  if (!obj.empty()) std::memcpy(mine.data(), obj.data(), obj.size());
  if (max > 0) all_gather_into_tensor(Tensor::of(all), Tensor::of(mine), pg);
  object_list.assign(n, {});
  for (int r = 0; r < n; ++r)
    object_list[r].assign(all.begin() + r * max, all.begin() + r * max + sizes[r]);
}

void gather_object(const Object& obj, std::vector<Object>* object_gather_list, int dst,
                   const std::shared_ptr<ProcessGroup>& group) {
  auto pg = resolve(group);
  check_member(*pg, "gather_object");
  int n = pg->size();
  bool root = pg->global_rank(pg->rank()) == dst;
  if (root && !object_gather_list)
    throw InvalidArgument("gather_object: the destination rank " + std::to_string(dst) +
                          " must pass an output list");
  std::vector<int64_t> sizes = gather_sizes(static_cast<int64_t>(obj.size()), pg);
  int64_t max = max_of(sizes);
  std::vector<uint8_t> mine(max, 0), all(root ? static_cast<size_t>(max) * n : 0);
  if (!obj.empty()) std::memcpy(mine.data(), obj.data(), obj.size());
  if (max > 0) {
    std::vector<Tensor> views;
    if (root)
      for (int r = 0; r < n; ++r) views.push_back(Tensor::of(all.data() + r * max, max));
    gather(Tensor::of(mine), views, dst, pg);
  }
  if (!root) return;
  object_gather_list->assign(n, {});
  for (int r = 0; r < n; ++r)
    (*object_gather_list)[r].assign(all.begin() + r * max, all.begin() + r * max + sizes[r]);
}

void scatter_object_list(std::vector<Object>& scatter_object_output_list,
                         const std::vector<Object>& scatter_object_input_list, int src,
                         const std::shared_ptr<ProcessGroup>& group) {
  auto pg = resolve(group);
  check_member(*pg, "scatter_object_list");
  int n = pg->size();
  bool root = pg->global_rank(pg->rank()) == src;
  if (root && static_cast<int>(scatter_object_input_list.size()) != n)
    throw InvalidArgument("scatter_object_list: the source rank " + std::to_string(src) +
                          " passed " + std::to_string(scatter_object_input_list.size()) +
                          " objects for a group of " + std::to_string(n));
  std::vector<int64_t> sizes(n);
  if (root)
    for (int r = 0; r < n; ++r) sizes[r] = static_cast<int64_t>(scatter_object_input_list[r].size());
  broadcast(Tensor::of(sizes), src, pg);
  int64_t max = max_of(sizes);
  std::vector<uint8_t> all(root ? static_cast<size_t>(max) * n : 0), mine(max);
  if (max > 0) {
    std::vector<Tensor> views;
    if (root) {
      for (int r = 0; r < n; ++r) {
        const Object& o = scatter_object_input_list[r];
        if (!o.empty()) std::memcpy(all.data() + r * max, o.data(), o.size());
        views.push_back(Tensor::of(all.data() + r * max, max));
      }
    }
    scatter(Tensor::of(mine), views, src, pg);
  }
  if (scatter_object_output_list.empty()) scatter_object_output_list.resize(1);
  scatter_object_output_list[0].assign(mine.begin(), mine.begin() + sizes[pg->rank()]);
}

void send_object_list(const std::vector<Object>& object_list, int dst,
                      const std::shared_ptr<ProcessGroup>& group) {
  auto pg = resolve(group);
  check_member(*pg, "send_object_list");
  int64_t count = static_cast<int64_t>(object_list.size());
  std::vector<int64_t> sizes;
  std::vector<uint8_t> payload;
  for (const Object& o : object_list) {
    sizes.push_back(static_cast<int64_t>(o.size()));
    payload.insert(payload.end(), o.begin(), o.end());
  }
  send(Tensor::of(&count, 1), dst, pg, kTagCount);
  if (count > 0) send(Tensor::of(sizes), dst, pg, kTagSizes);
  if (!payload.empty()) send(Tensor::of(payload), dst, pg, kTagPayload);
}

int recv_object_list(std::vector<Object>& object_list, int src,
                     const std::shared_ptr<ProcessGroup>& group) {
  auto pg = resolve(group);
  check_member(*pg, "recv_object_list");
  int64_t count = -1;
  int from = recv(Tensor::of(&count, 1), src, pg, kTagCount);
  if (count < 0 || count > (int64_t{1} << 32))
    throw MismatchError("recv_object_list: rank " + std::to_string(from) + " announced " +
                        std::to_string(count) + " objects");
  std::vector<int64_t> sizes(count);
  if (count > 0) recv(Tensor::of(sizes), from, pg, kTagSizes);
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw MismatchError("recv_object_list: rank " + std::to_string(from) +
                                   " announced a negative object size");
    total += s;
  }
  std::vector<uint8_t> payload(total);
  if (total > 0) recv(Tensor::of(payload), from, pg, kTagPayload);
  object_list.assign(count, {});
  size_t off = 0;
  for (int64_t i = 0; i < count; ++i) {
    object_list[i].assign(payload.begin() + off, payload.begin() + off + sizes[i]);
    off += sizes[i];
  }
  return from;
}

void all_gather_object_enforce_type(const std::shared_ptr<ProcessGroup>& group,
                                    std::vector<TypedObject>& object_list,
                                    const TypedObject& obj) {
  // One gather of [type length (4 bytes)][type][bytes] per rank.
  Object packed(4 + obj.type.size() + obj.bytes.size());
  uint32_t tl = static_cast<uint32_t>(obj.type.size());
  std::memcpy(packed.data(), &tl, 4);
  std::memcpy(packed.data() + 4, obj.type.data(), obj.type.size());
  if (!obj.bytes.empty()) std::memcpy(packed.data() + 4 + tl, obj.bytes.data(), obj.bytes.size());
  std::vector<Object> all;
  all_gather_object(all, packed, group);
  object_list.assign(all.size(), {});
  for (size_t r = 0; r < all.size(); ++r) {
    const Object& p = all[r];
    uint32_t len = 0;
    if (p.size() >= 4) std::memcpy(&len, p.data(), 4);
    if (p.size() < 4 || p.size() - 4 < len)
      throw MismatchError("all_gather_object_enforce_type: rank " + std::to_string(r) +
                          " sent a malformed typed object");
    object_list[r].type.assign(reinterpret_cast<const char*>(p.data()) + 4, len);
    object_list[r].bytes.assign(p.begin() + 4 + len, p.end());
  }
  // Every rank sees the same list, so every rank decides alike.
  std::map<std::string, std::vector<size_t>> by_type;
  for (size_t r = 0; r < object_list.size(); ++r) by_type[object_list[r].type].push_back(r);
  if (by_type.size() <= 1) return;
  std::string msg = "all_gather_object_enforce_type: the ranks gathered objects of " +
                    std::to_string(by_type.size()) + " different types:";
  for (auto& [type, ranks] : by_type) {
    msg += " ranks";
    for (size_t i = 0; i < ranks.size(); ++i) msg += (i ? "," : " ") + std::to_string(ranks[i]);
    msg += " have '" + type + "';";
  }
  msg.back() = '.';
  msg += " Every rank must pass an object of the same type (rank 0's: '" +
         object_list[0].type + "').";
  throw MismatchError(msg);
}

}  // namespace tpcomm
