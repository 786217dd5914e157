// The transport registry: name -> factory. Filled by the generated
// register_builtin_transports() (one call per transports/<name>/ folder) and by tests.
#include <algorithm>
#include <map>
#include <mutex>

#include "tpcomm/error.hpp"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm::transport {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, TransportFactory> factories;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: transports may outlive statics
  return *r;
}

}  // namespace

void register_transport(const std::string& name, TransportFactory factory) {
  if (name.empty() || !factory) throw InvalidArgument("register_transport: empty name or factory");
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.factories[name] = std::move(factory);
}

std::vector<std::string> transport_names() {
  register_builtin_transports();
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  std::vector<std::string> out;
  for (auto& [name, f] : r.factories) out.push_back(name);
  return out;
}

bool has_transport(const std::string& name) {
  register_builtin_transports();
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  return r.factories.count(name) > 0;
}

std::unique_ptr<Transport> create_transport(const std::string& name, const TransportContext& ctx) {
  register_builtin_transports();
  TransportFactory f;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    auto it = r.factories.find(name);
    if (it == r.factories.end()) {
      std::string known;
      for (auto& [n, g] : r.factories) known += (known.empty() ? "" : ", ") + n;
      throw InvalidArgument("unknown transport '" + name +
                            "' (built in: " + (known.empty() ? "none" : known) +
                            "); check TPCOMM_TRANSPORT or the backend name");
    }
    f = it->second;
  }
  return f(ctx);
}

}  // namespace tpcomm::transport
