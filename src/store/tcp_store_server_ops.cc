// TCPStore server: the key-value operations and the parked waits (GET/WAIT/MULTI_GET that
// are answered when their keys appear). Runs on the server thread only.
#include <algorithm>

#include "core/log.h"
#include "store/store_util.h"
#include "store/tcp_store_server_impl.h"
#include "tpcomm/error.hpp"

namespace tpcomm {

using store_wire::ErrorCode;
using store_wire::Header;
using store_wire::Op;
using store_wire::Request;
using store_wire::Writer;

namespace {

Bytes to_vec(std::span<const uint8_t> s) { return Bytes(s.begin(), s.end()); }

constexpr size_t kMaxParkedPerConn = 4096;

}  // namespace

void TCPStoreServer::Impl::handle_frame(Conn& c, const Header& h, const uint8_t* payload) {
  if (!c.hello) {
    handle_hello(c, h, payload);
    return;
  }
  store_wire::DecodeError derr;
  if (!store_wire::decode_request(h, payload, limits, &req, &derr)) {
    reply_error(c, h.id, derr.code, derr.message);
    if (derr.code == ErrorCode::kBadFrame) {
      TPLOG(WARN, STORE) << "TCPStore server " << addr << ": protocol error from " << c.peer << " ("
                         << c.client << "): " << derr.message << "; closing";
      c.close_after_flush = true;
    }
    return;
  }
  const Request& r = req;
  const Op op = static_cast<Op>(r.op);
  const bool reply = !(r.flags & store_wire::kFlagNoReply);
  Writer w(&c.out);
  switch (op) {
    case Op::kHello:
      reply_error(c, r.id, ErrorCode::kBadFrame, "hello sent twice on one connection");
      c.close_after_flush = true;
      return;
    case Op::kSet:
      put_value(r.key, r.value);
      if (reply) {
        w.begin(Op::kOk, r.id);
        w.end();
      }
      break;
    case Op::kGet: {
      auto it = data.find(r.key);
      if (it == data.end()) {
        park(c, r);
        return;
      }
      w.begin(Op::kValue, r.id);
      w.str(std::span<const uint8_t>(it->second));
      w.end();
      break;
    }
    case Op::kAdd: {
      auto it = data.find(r.key);
      int64_t v;
      try {
        v = store_util::apply_add(r.key, it == data.end() ? nullptr : &it->second, r.delta);
      } catch (const StoreError& e) {
        reply_error(c, r.id, ErrorCode::kNotCounter, e.what());
        return;
      }
      char digits[24];
      int n = std::snprintf(digits, sizeof(digits), "%lld", static_cast<long long>(v));
      std::span<const uint8_t> text(reinterpret_cast<uint8_t*>(digits), static_cast<size_t>(n));
      if (it != data.end()) {
        it->second.assign(text.begin(), text.end());  // no second lookup, no allocation
      } else {
        put_value(r.key, text);
      }
      w.begin(Op::kInt, r.id);
      w.i64(v);
      w.end();
      break;
    }
    case Op::kCompareSet: {
      auto it = data.find(r.key);
      Bytes expected = to_vec(r.value), desired = to_vec(r.desired);
      auto [store, ret] = store_util::apply_compare_set(it == data.end() ? nullptr : &it->second,
                                                        expected, desired);
      if (store) put_value(r.key, *store);
      w.begin(Op::kValue, r.id);
      w.str(std::span<const uint8_t>(ret));
      w.end();
      break;
    }
    case Op::kDelete: {
      auto it = data.find(r.key);
      bool existed = it != data.end();
      if (existed) data.erase(it);
      w.begin(Op::kInt, r.id);
      w.i64(existed ? 1 : 0);
      w.end();
      break;
    }
    case Op::kCheck: {
      bool all = std::all_of(r.keys.begin(), r.keys.end(),
                             [&](std::string_view k) { return data.find(k) != data.end(); });
      w.begin(Op::kInt, r.id);
      w.i64(all ? 1 : 0);
      w.end();
      break;
    }
    case Op::kWait:
    case Op::kMultiGet: {
      for (std::string_view k : r.keys) {
        if (data.find(k) == data.end()) {
          park(c, r);
          return;
        }
      }
      answer_views(c, r.id, r.op, r.keys);
      return;
    }
    case Op::kNumKeys:
      w.begin(Op::kInt, r.id);
      w.i64(static_cast<int64_t>(data.size()));
      w.end();
      break;
    case Op::kAppend: {
      auto it = data.find(r.key);
      if (it == data.end()) {
        put_value(r.key, r.value);
      } else if (it->second.size() + r.value.size() > cfg.max_value) {
        reply_error(c, r.id, ErrorCode::kTooLarge,
                    "append('" + std::string(r.key.substr(0, 64)) + "'): the value would grow to " +
                        std::to_string(it->second.size() + r.value.size()) +
                        " bytes, over the server's limit TPCOMM_STORE_MAX_VALUE=" +
                        std::to_string(cfg.max_value) + " bytes");
        return;
      } else {
        it->second.insert(it->second.end(), r.value.begin(), r.value.end());
      }
      if (reply) {
        w.begin(Op::kOk, r.id);
        w.end();
      }
      break;
    }
    case Op::kMultiSet:
      for (size_t i = 0; i < r.keys.size(); ++i) put_value(r.keys[i], r.values[i]);
      if (reply) {
        w.begin(Op::kOk, r.id);
        w.end();
      }
      break;
    case Op::kCancel:
      cancel(c, r.id, r.target);
      return;
    default:
      reply_error(c, r.id, ErrorCode::kBadFrame, "unexpected op " + std::to_string(r.op));
      c.close_after_flush = true;
      return;
  }
  mark_dirty(c);
}

void TCPStoreServer::Impl::put_value(std::string_view key, std::span<const uint8_t> value) {
  auto it = data.find(key);
  if (it != data.end()) {
    it->second.assign(value.begin(), value.end());  // reuses the capacity
    return;
  }
  data.emplace(std::string(key), to_vec(value));
  notify(key);
}

const std::string* TCPStoreServer::Impl::first_missing(const Waiter& w) const {
  for (const std::string& k : w.keys)
    if (data.find(k) == data.end()) return &k;
  return nullptr;
}

void TCPStoreServer::Impl::watch_key(const std::string& key, uint64_t waiter_id) {
  auto& ids = watch[key];
  // Cancelled waiters leave stale ids behind; sweep them whenever the list doubles.
  if (ids.size() >= 64 && (ids.size() & (ids.size() - 1)) == 0) {
    ids.erase(std::remove_if(ids.begin(), ids.end(),
                             [&](uint64_t id) { return waiters.find(id) == waiters.end(); }),
              ids.end());
  }
  ids.push_back(waiter_id);
}

void TCPStoreServer::Impl::park(Conn& c, const Request& r) {
  if (c.parked.size() >= kMaxParkedPerConn) {
    // Our client has one request in flight; thousands parked on one connection is abuse.
    reply_error(c, r.id, ErrorCode::kBadFrame,
                "more than " + std::to_string(kMaxParkedPerConn) +
                    " blocking requests parked on one connection; closing it");
    c.close_after_flush = true;
    return;
  }
  uint64_t id = next_waiter++;
  Waiter& w = waiters[id];
  w.fd = c.fd;
  w.conn_id = c.id;
  w.req_id = r.id;
  w.op = r.op;
  if (r.op == static_cast<uint8_t>(Op::kGet)) {
    w.keys.emplace_back(r.key);
  } else {
    w.keys.reserve(r.keys.size());
    for (std::string_view k : r.keys) w.keys.emplace_back(k);
  }
  c.parked.emplace_back(r.id, id);
  watch_key(*first_missing(w), id);
}

void TCPStoreServer::Impl::notify(std::string_view key) {
  auto it = watch.find(key);
  if (it == watch.end()) return;
  std::vector<uint64_t> ids = std::move(it->second);
  watch.erase(it);
  for (uint64_t id : ids) {
    auto wit = waiters.find(id);
    if (wit == waiters.end()) continue;  // cancelled or its client left
    if (const std::string* k = first_missing(wit->second)) {
      watch_key(*k, id);
    } else {
      complete(id);
    }
  }
}

void TCPStoreServer::Impl::answer(Conn& c, uint32_t req_id, uint8_t op,
                                  const std::vector<std::string>& keys) {
  Writer w(&c.out);
  switch (static_cast<Op>(op)) {
    case Op::kGet:
      w.begin(Op::kValue, req_id);
      w.str(std::span<const uint8_t>(data.find(keys[0])->second));
      break;
    case Op::kWait:
      w.begin(Op::kOk, req_id);
      break;
    default:
      w.begin(Op::kValues, req_id);
      w.u32(static_cast<uint32_t>(keys.size()));
      for (const std::string& k : keys) w.str(std::span<const uint8_t>(data.find(k)->second));
      break;
  }
  w.end();
  mark_dirty(c);
}

void TCPStoreServer::Impl::answer_views(Conn& c, uint32_t req_id, uint8_t op,
                                        const std::vector<std::string_view>& keys) {
  Writer w(&c.out);
  if (static_cast<Op>(op) == Op::kWait) {
    w.begin(Op::kOk, req_id);
  } else {
    w.begin(Op::kValues, req_id);
    w.u32(static_cast<uint32_t>(keys.size()));
    for (std::string_view k : keys) w.str(std::span<const uint8_t>(data.find(k)->second));
  }
  w.end();
  mark_dirty(c);
}

void TCPStoreServer::Impl::complete(uint64_t waiter_id) {
  auto it = waiters.find(waiter_id);
  Waiter& w = it->second;
  Conn* c = static_cast<size_t>(w.fd) < conns.size() ? conns[w.fd].get() : nullptr;
  if (c && c->id == w.conn_id && !c->dead) {
    answer(*c, w.req_id, w.op, w.keys);
    auto& p = c->parked;
    p.erase(
        std::remove_if(p.begin(), p.end(), [&](const auto& e) { return e.second == waiter_id; }),
        p.end());
  }
  waiters.erase(it);
}

void TCPStoreServer::Impl::cancel(Conn& c, uint32_t cancel_id, uint32_t target) {
  // Reply with the keys the cancelled request still lacked (for the client's timeout
  // message); an empty list when it was answered already (that answer went out first).
  Writer w(&c.out);
  w.begin(Op::kKeys, cancel_id);
  auto& p = c.parked;
  auto pit = std::find_if(p.begin(), p.end(), [&](const auto& e) { return e.first == target; });
  if (pit == p.end()) {
    w.u32(0);
  } else {
    auto wit = waiters.find(pit->second);
    std::vector<const std::string*> missing;
    if (wit != waiters.end()) {
      for (const std::string& k : wit->second.keys)
        if (data.find(k) == data.end()) missing.push_back(&k);
    }
    w.u32(static_cast<uint32_t>(missing.size()));
    for (const std::string* k : missing) w.str(*k);
    if (wit != waiters.end()) waiters.erase(wit);
    p.erase(pit);
  }
  w.end();
  mark_dirty(c);
}

void TCPStoreServer::Impl::drop_parked(Conn& c) {
  for (auto& [req_id, wid] : c.parked) waiters.erase(wid);
  c.parked.clear();
}

}  // namespace tpcomm
