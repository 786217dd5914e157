// JSON encoding of the topology's parts, shared by the full dump (serialize.cc) and the
// per-rank summary (summary.cc). Readers check types and ranges and name the field at fault.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "topology/topology.h"

namespace tpcomm::topo::detail {

json::Json encode(const PciDevice& d);
json::Json encode(const Gpu& g);
json::Json encode(const NicPort& p);
json::Json encode(const Nic& n);
json::Json encode(const NetIf& n);
json::Json encode_strings(const std::vector<std::string>& v);

// Readers: `where` names the enclosing field ("gpus[2]") for error messages.
PciDevice decode_pci(const json::Json& v, const std::string& where);
Gpu decode_gpu(const json::Json& v, const std::string& where);
Nic decode_nic(const json::Json& v, const std::string& where);
NetIf decode_netif(const json::Json& v, const std::string& where);

// Field readers: a missing member leaves the default; a wrong type or range throws
// InvalidArgument naming "<where>.<key>".
void get(const json::Json& o, const std::string& where, std::string_view key, std::string* out);
void get(const json::Json& o, const std::string& where, std::string_view key, int* out);
void get(const json::Json& o, const std::string& where, std::string_view key, bool* out);
void get(const json::Json& o, const std::string& where, std::string_view key, double* out);
void get(const json::Json& o, const std::string& where, std::string_view key, uint16_t* out);
void get(const json::Json& o, const std::string& where, std::string_view key, uint64_t* out);
void get(const json::Json& o, const std::string& where, std::string_view key,
         std::vector<std::string>* out);

// Calls f(element, "key[i]") for each element of the array member `key`, if present.
template <class F>
void each(const json::Json& o, const std::string& where, std::string_view key, F&& f) {
  const json::Json* a = json::find(o, key);
  if (!a) return;
  std::string base = where + "." + std::string(key);
  const json::Json& arr = json::as_array(*a, base);
  for (size_t i = 0; i < arr.size(); ++i) f(arr[i], base + "[" + std::to_string(i) + "]");
}

}  // namespace tpcomm::topo::detail
