// Registration of the ucx transport: its TPCOMM_UCX_* variables and its factory.
#include "core/auth.h"
#include "core/config.h"
#include "tpcomm/error.hpp"
#include "tpcomm/transport/transport.hpp"
#include "transports/ucx/ucx_transport.h"

namespace tpcomm::ucx {
namespace {

using config::Param;
using T = config::Type;

// clang-format off
constexpr Param kParams[] = {
  {"TPCOMM_UCX_CLOSE_TIMEOUT", T::Duration, "30s", "",
   "ucx transport: at shutdown, how long the endpoints' flushes (messages still queued in UCX, "
   "eager sends already reported complete among them) are waited for while their peer lives; "
   "what is left is then dropped, with a warning. A peer that exits is not waited for.", "ucx"},
  {"TPCOMM_UCX_LIBRARY", T::String, "libucp.so.0", "",
   "ucx transport: the UCP library opened at run time; when it cannot be loaded the transport "
   "is unavailable and the engine falls back to the others.", "ucx"},
  {"TPCOMM_UCX_MAX_MESSAGE", T::Size, "256K", "",
   "ucx transport: size of each pre-posted receive buffer, the largest eager message.", "ucx"},
  {"TPCOMM_UCX_MAX_REQUESTS", T::Int, "16384", "16..16777216",
   "ucx transport: UCX requests outstanding (sends, receives, the posted pool) before posts "
   "answer NoResource and the protocol queues them; at least TPCOMM_UCX_RECV_DEPTH + 8.", "ucx"},
  {"TPCOMM_UCX_NET_DEVICES", T::String, "", "",
   "ucx transport: UCX_NET_DEVICES for tpcomm only (set on tpcomm's UCX configuration; UCX's own "
   "UCX_NET_DEVICES applies when empty).", "ucx"},
  {"TPCOMM_UCX_PUT", T::Enum, "auto", "auto|rma|tag",
   "ucx transport: how put travels. auto: ucp_put_nbx where UCX reports an RMA lane to the peer "
   "(shared memory, RDMA), tagged messages received in place where UCX would emulate RMA (tcp); "
   "rma or tag force one.", "ucx"},
  {"TPCOMM_UCX_RECV_DEPTH", T::Int, "16", "4..1024",
   "ucx transport: receives kept posted for eager messages.", "ucx"},
  {"TPCOMM_UCX_RNDV_THRESHOLD", T::Size, "64K", "",
   "ucx transport: suggested eager/rendezvous switch (TPCOMM_RNDV_THRESHOLD overrides it).",
   "ucx"},
  {"TPCOMM_UCX_TAGGED", T::Enum, "auto", "auto|tag|off",
   "ucx transport: large messages without the protocol's CTS round trip, the data sent at once "
   "and held by UCX until the receive matches. auto: the protocol's RTS rides inside UCX's own "
   "rendezvous RTS (an active message, one message per transfer); tag: the RTS as a message, "
   "then the data as a tagged message (two); off: RTS -> CTS -> put as on other transports. "
   "Not with TPCOMM_UCX_PUT=rma.", "ucx"},
  {"TPCOMM_UCX_TAGGED_MAX", T::Size, "1M", "",
   "ucx transport: the largest message sent without the CTS round trip (TPCOMM_UCX_TAGGED); "
   "larger ones take RTS -> CTS -> put, measured faster for them over UCX's tcp.", "ucx"},
  {"TPCOMM_UCX_TLS", T::String, "", "",
   "ucx transport: UCX_TLS for tpcomm only (e.g. 'tcp', 'posix,cma,self'), set on tpcomm's UCX "
   "configuration so other UCX users in the process keep theirs; empty: UCX_TLS or UCX's "
   "default.", "ucx"},
};
// clang-format on

}  // namespace

Options Options::from_env() {
  Options o;
  o.library = config::get_string("TPCOMM_UCX_LIBRARY");
  o.tls = config::get_string("TPCOMM_UCX_TLS");
  o.net_devices = config::get_string("TPCOMM_UCX_NET_DEVICES");
  std::string put = config::get_enum("TPCOMM_UCX_PUT");
  o.put = put == "rma" ? PutMode::Rma : put == "tag" ? PutMode::Tag : PutMode::Auto;
  o.max_message = std::max<uint64_t>(16384, config::get_size("TPCOMM_UCX_MAX_MESSAGE"));
  o.rndv_threshold = config::get_size("TPCOMM_UCX_RNDV_THRESHOLD");
  o.recv_depth = static_cast<int>(config::get_int("TPCOMM_UCX_RECV_DEPTH"));
  o.max_requests = static_cast<size_t>(config::get_int("TPCOMM_UCX_MAX_REQUESTS"));
  std::string tagged = config::get_enum("TPCOMM_UCX_TAGGED");
  o.tagged = tagged != "off";
  o.tagged_am = tagged == "auto";
  o.tagged_max = config::get_size("TPCOMM_UCX_TAGGED_MAX");
  o.close_timeout = config::get_duration("TPCOMM_UCX_CLOSE_TIMEOUT");
  return o;
}

}  // namespace tpcomm::ucx

namespace tpcomm::transport {

void register_ucx_transport() {
  config::register_params(ucx::kParams);
  register_transport("ucx", [](const TransportContext& ctx) -> std::unique_ptr<Transport> {
    // UCX makes its own connections (its wire-up), which cannot carry tpcomm's
    // challenge-response: with a shared secret the job keeps to transports that prove it.
    if (!auth::job_secret().empty())
      throw NotSupportedError(
          "ucx: TPCOMM_AUTH_SECRET is set and UCX's own connections cannot prove it (any process "
          "that learns a worker address could send to this rank); tpcomm uses its "
          "authenticated transports instead. Unset the secret to use UCX");
    return std::make_unique<ucx::UcxTransport>(ctx, ucx::Options::from_env());
  });
}

}  // namespace tpcomm::transport
