// JSON encoding of the topology's parts, shared by the full dump (serialize.cc) and the
// per-rank summary (summary.cc). Readers check types and ranges and name the field at fault.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "topology/json.h"
#include "topology/topology.h"

namespace tpcomm::topo::detail {

json::Value encode(const PciDevice& d);
json::Value encode(const Gpu& g);
json::Value encode(const NicPort& p);
json::Value encode(const Nic& n);
json::Value encode(const NetIf& n);
json::Value encode_strings(const std::vector<std::string>& v);

// Readers: `where` names the enclosing field ("gpus[2]") for error messages.
PciDevice decode_pci(const json::Value& v, const std::string& where);
Gpu decode_gpu(const json::Value& v, const std::string& where);
Nic decode_nic(const json::Value& v, const std::string& where);
NetIf decode_netif(const json::Value& v, const std::string& where);

// Field readers: a missing member leaves the default; a wrong type or range throws
// InvalidArgument naming "<where>.<key>".
void get(const json::Value& o, const std::string& where, std::string_view key, std::string* out);
void get(const json::Value& o, const std::string& where, std::string_view key, int* out);
void get(const json::Value& o, const std::string& where, std::string_view key, bool* out);
void get(const json::Value& o, const std::string& where, std::string_view key, double* out);
void get(const json::Value& o, const std::string& where, std::string_view key, uint16_t* out);
void get(const json::Value& o, const std::string& where, std::string_view key, uint64_t* out);
void get(const json::Value& o, const std::string& where, std::string_view key,
         std::vector<std::string>* out);

// Calls f(element, "key[i]") for each element of the array member `key`, if present.
template <class F>
void each(const json::Value& o, const std::string& where, std::string_view key, F&& f) {
  const json::Value* a = o.find(key);
  if (!a) return;
  std::string base = where + "." + std::string(key);
  const json::Array& arr = a->as_array(base);
  for (size_t i = 0; i < arr.size(); ++i) f(arr[i], base + "[" + std::to_string(i) + "]");
}

}  // namespace tpcomm::topo::detail
