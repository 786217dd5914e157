// HashStore: an in-process store (a map under a mutex, waits on a condition variable).
#include <condition_variable>
#include <map>
#include <mutex>

#include "core/deadline.h"
#include "store/store_util.h"
#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm {

struct HashStore::State {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Bytes> data;

  // Waits until every key exists or the deadline passes; returns the missing keys.
  std::vector<std::string> wait_locked(std::unique_lock<std::mutex>& lk,
                                       const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) {
    Deadline d = Deadline::after(timeout);
    auto missing = [&] {
      std::vector<std::string> m;
      for (const auto& k : keys)
        if (!data.count(k)) m.push_back(k);
      return m;
    };
    while (true) {
      auto m = missing();
      if (m.empty() || d.expired()) return m;
      if (d.is_never()) cv.wait(lk);
      else cv.wait_until(lk, d.when());
    }
  }
};

HashStore::HashStore() : state_(std::make_unique<State>()) {}
HashStore::~HashStore() = default;

void HashStore::set(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> lk(state_->mu);
  state_->data[key] = value;
  state_->cv.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  std::unique_lock<std::mutex> lk(state_->mu);
  auto missing = state_->wait_locked(lk, {key}, timeout_);
  if (!missing.empty())
    throw TimeoutError(store_util::missing_keys_message("HashStore::get", missing, 1, timeout_));
  return state_->data[key];
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lk(state_->mu);
  auto it = state_->data.find(key);
  int64_t v = store_util::apply_add(key, it == state_->data.end() ? nullptr : &it->second, delta);
  state_->data[key] = store_util::encode_counter(v);
  state_->cv.notify_all();
  return v;
}

Bytes HashStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  std::lock_guard<std::mutex> lk(state_->mu);
  auto it = state_->data.find(key);
  auto [store, ret] =
      store_util::apply_compare_set(it == state_->data.end() ? nullptr : &it->second, expected,
                                    desired);
  if (store) {
    state_->data[key] = std::move(*store);
    state_->cv.notify_all();
  }
  return ret;
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->data.erase(key) > 0;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lk(state_->mu);
  for (const auto& k : keys)
    if (!state_->data.count(k)) return false;
  return true;
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(state_->mu);
  auto missing = state_->wait_locked(lk, keys, timeout);
  if (!missing.empty())
    throw TimeoutError(
        store_util::missing_keys_message("HashStore::wait", missing, keys.size(), timeout));
}

int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lk(state_->mu);
  return static_cast<int64_t>(state_->data.size());
}

void HashStore::append(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> lk(state_->mu);
  Bytes& v = state_->data[key];
  v.insert(v.end(), value.begin(), value.end());
  state_->cv.notify_all();
}

std::vector<Bytes> HashStore::multi_get(const std::vector<std::string>& keys) {
  std::unique_lock<std::mutex> lk(state_->mu);
  auto missing = state_->wait_locked(lk, keys, timeout_);
  if (!missing.empty())
    throw TimeoutError(
        store_util::missing_keys_message("HashStore::multi_get", missing, keys.size(), timeout_));
  std::vector<Bytes> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(state_->data[k]);
  return out;
}

void HashStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  store_util::check_multi_set(keys, values);
  std::lock_guard<std::mutex> lk(state_->mu);
  for (size_t i = 0; i < keys.size(); ++i) state_->data[keys[i]] = values[i];
  state_->cv.notify_all();
}

}  // namespace tpcomm
