// PrefixStore: namespaces keys as "<prefix>/<key>" over any store.
#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : prefix_(std::move(prefix)), store_(std::move(store)) {
  if (!store_) throw InvalidArgument("PrefixStore('" + prefix_ + "'): the wrapped store is null");
  timeout_ = store_->timeout();
}

std::vector<std::string> PrefixStore::join(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(join(k));
  return out;
}

void PrefixStore::set(const std::string& key, const Bytes& value) { store_->set(join(key), value); }
Bytes PrefixStore::get(const std::string& key) { return store_->get(join(key)); }
int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return store_->add(join(key), delta);
}
Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  return store_->compare_set(join(key), expected, desired);
}
bool PrefixStore::delete_key(const std::string& key) { return store_->delete_key(join(key)); }
bool PrefixStore::check(const std::vector<std::string>& keys) { return store_->check(join(keys)); }
bool PrefixStore::check_within(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) {
  return store_->check_within(join(keys), timeout);
}
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  store_->wait(join(keys), timeout);
}
int64_t PrefixStore::num_keys() { return store_->num_keys(); }
void PrefixStore::append(const std::string& key, const Bytes& value) {
  store_->append(join(key), value);
}
std::vector<Bytes> PrefixStore::multi_get(const std::vector<std::string>& keys) {
  return store_->multi_get(join(keys));
}
void PrefixStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<Bytes>& values) {
  store_->multi_set(join(keys), values);
}
void PrefixStore::set_timeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  store_->set_timeout(timeout);
}

}  // namespace tpcomm
