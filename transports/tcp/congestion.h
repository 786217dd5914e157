// The TCP congestion control of the tcp transport's sockets (TPCOMM_SOCKET_CONGESTION). A
// connection between two processes of one host runs over the loopback device: no loss, a round
// trip of microseconds, so a congestion control only costs. BBR, the default of many current
// kernels, paces every socket (an hrtimer per burst): iperf3 over loopback moves 4.6-4.8 GB/s
// with it against 6.3-6.6 with reno or cubic on the same machine. "auto" gives same-host
// connections reno (always allowed to unprivileged processes) and leaves the system's choice
// to the others.
#pragma once

#include <string>

#include "net/socket.h"

namespace tpcomm::tcp {

/// The loss-free choice for a same-host connection in "auto" mode.
inline constexpr const char* kLocalCongestion = "reno";

/// The system's default (net.ipv4.tcp_congestion_control), "" when it cannot be read.
const std::string& system_congestion();

/// Whether a connection from `local` to `peer` stays within this host: the peer is a loopback
/// address (127.0.0.0/8, ::1) or the local address itself (another process of this host
/// listening on the same interface address).
bool same_host(const net::SockAddr& local, const net::SockAddr& peer);

/// Sets the socket's congestion control; false (with the reason in `error`) when the kernel
/// refuses (unknown name, or not in net.ipv4.tcp_allowed_congestion_control for an
/// unprivileged process).
bool set_congestion(int fd, const std::string& name, std::string* error);

/// The congestion control the socket uses now ("" when it cannot be read).
std::string congestion_of(int fd);

}  // namespace tpcomm::tcp
