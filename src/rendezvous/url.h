// URL parsing for rendezvous: scheme://host:port/path?name=value&..., with IPv6 hosts in
// brackets and percent-decoding. Every error names the URL and the faulty part. Kept here:
// libcurl's URL API would add a network library to libtpcomm for ~150 lines of parsing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace tpcomm::rdzv {

/// The parts of an init_method URL.
struct Url {
  std::string text;                          ///< the URL as given, for messages
  std::string scheme;                        ///< lower-cased, without "://"
  std::string host;                          ///< decoded, without IPv6 brackets; empty when absent
  std::optional<uint16_t> port;              ///< when ":port" was given
  std::string path;                          ///< percent-decoded; "" when absent
  std::map<std::string, std::string> query;  ///< decoded name -> value
};

/// The scheme of url (lower-cased), or throws InvalidArgument when it has no "scheme://".
std::string url_scheme(const std::string& url);

/// Parses url. Throws InvalidArgument on a malformed one (no scheme, bad port, unbalanced
/// IPv6 brackets, bad percent-escape, malformed or repeated query parameter).
Url parse_url(const std::string& url);

/// Decodes %XX escapes of s (a part of `url`); throws InvalidArgument naming url on a bad one.
std::string percent_decode(const std::string& s, const std::string& url);

}  // namespace tpcomm::rdzv
