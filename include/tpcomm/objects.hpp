// Object collectives (torch.distributed's *_object* functions): objects are byte strings
// serialized by the caller; typed helpers cover trivially copyable types, std::string and
// vectors of trivially copyable types. Every function moves sizes first, then one payload
// collective (not one call per object), so objects of very different sizes per rank work.
// Ranks (src, dst) are global ranks, as in the tensor free functions; group null = the world.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "tpcomm/error.hpp"
#include "tpcomm/process_group.hpp"

namespace tpcomm {

/// One serialized object.
using Object = std::vector<uint8_t>;

/// An object with the stable name of its type, for all_gather_object_enforce_type.
struct TypedObject {
  std::string type;  ///< e.g. from type_name<T>(); compared as text, never as a pointer
  Object bytes;
};

/// Copies `object_list` of global rank `src` to every member; the other ranks' lists are
/// resized to the source's count (their contents are ignored, as torch's None entries).
void broadcast_object_list(std::vector<Object>& object_list, int src = 0,
                           const std::shared_ptr<ProcessGroup>& group = nullptr);
/// object_list = every member's `obj` in group-rank order (resized to the group size).
void all_gather_object(std::vector<Object>& object_list, const Object& obj,
                       const std::shared_ptr<ProcessGroup>& group = nullptr);
/// On global rank `dst`, *object_gather_list = every member's `obj` in group-rank order
/// (others may pass null).
void gather_object(const Object& obj, std::vector<Object>* object_gather_list, int dst = 0,
                   const std::shared_ptr<ProcessGroup>& group = nullptr);
/// scatter_object_output_list[0] = the source's scatter_object_input_list[group rank]; the
/// input list (one object per member) matters on `src` only.
void scatter_object_list(std::vector<Object>& scatter_object_output_list,
                         const std::vector<Object>& scatter_object_input_list, int src = 0,
                         const std::shared_ptr<ProcessGroup>& group = nullptr);
/// Sends a list of objects to global rank `dst` (count, sizes, then one payload).
void send_object_list(const std::vector<Object>& object_list, int dst,
                      const std::shared_ptr<ProcessGroup>& group = nullptr);
/// Receives a list sent by send_object_list from `src` (kAnySource: from whoever sends
/// first); `object_list` is resized to the sender's count. Returns the sender's global rank.
int recv_object_list(std::vector<Object>& object_list, int src = kAnySource,
                     const std::shared_ptr<ProcessGroup>& group = nullptr);

/// Gathers like all_gather_object, then, on every rank, throws MismatchError naming the
/// ranks and their types when any rank's object has another type than rank 0's.
void all_gather_object_enforce_type(const std::shared_ptr<ProcessGroup>& group,
                                    std::vector<TypedObject>& object_list,
                                    const TypedObject& obj);

// ---- typed helpers ----

/// The stable name of T (the compiler's mangled name: equal in every rank of one build).
template <class T>
std::string type_name() {
  return typeid(T).name();
}

/// Serializes a trivially copyable value, a std::string, or a vector of trivially copyable
/// values.
template <class T>
Object to_object(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return Object(v.begin(), v.end());
  } else if constexpr (requires { typename T::value_type; v.data(); v.size(); }) {
    using E = typename T::value_type;
    static_assert(std::is_trivially_copyable_v<E>, "vector elements must be trivially copyable");
    Object o(v.size() * sizeof(E));
    if (!o.empty()) std::memcpy(o.data(), v.data(), o.size());
    return o;
  } else {
    static_assert(std::is_trivially_copyable_v<T>, "to_object needs a trivially copyable type");
    Object o(sizeof(T));
    std::memcpy(o.data(), &v, sizeof(T));
    return o;
  }
}

/// The inverse of to_object; throws InvalidArgument when the size does not fit T.
template <class T>
T from_object(const Object& o) {
  if constexpr (std::is_same_v<T, std::string>) {
    return std::string(o.begin(), o.end());
  } else if constexpr (requires(T t) { typename T::value_type; t.data(); t.resize(0); }) {
    using E = typename T::value_type;
    if (o.size() % sizeof(E) != 0)
      throw InvalidArgument("from_object: " + std::to_string(o.size()) +
                            " bytes are not a whole number of " + std::to_string(sizeof(E)) +
                            "-byte elements");
    T v;
    v.resize(o.size() / sizeof(E));
    if (!o.empty()) std::memcpy(v.data(), o.data(), o.size());
    return v;
  } else {
    if (o.size() != sizeof(T))
      throw InvalidArgument("from_object: the object has " + std::to_string(o.size()) +
                            " bytes, the type needs " + std::to_string(sizeof(T)));
    T v;
    std::memcpy(&v, o.data(), sizeof(T));
    return v;
  }
}

/// A TypedObject of `v` (to_object plus type_name<T>()).
template <class T>
TypedObject make_typed_object(const T& v) {
  return TypedObject{type_name<T>(), to_object(v)};
}

}  // namespace tpcomm
