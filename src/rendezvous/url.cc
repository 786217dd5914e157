#include "rendezvous/url.h"

#include <cctype>

#include "tpcomm/error.hpp"

namespace tpcomm::rdzv {
namespace {

[[noreturn]] void bad(const std::string& url, const std::string& what) {
  throw InvalidArgument("malformed rendezvous URL '" + url + "': " + what +
                        ". Expected env://, tcp://host:port?rank=R&world_size=N or "
                        "file:///path?rank=R&world_size=N");
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string percent_decode(const std::string& s, const std::string& url) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    int hi = i + 1 < s.size() ? hex_value(s[i + 1]) : -1;
    int lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) bad(url, "bad percent-escape '" + s.substr(i, 3) + "' (use %XX)");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string url_scheme(const std::string& url) {
  size_t sep = url.find("://");
  if (sep == std::string::npos || sep == 0) bad(url, "no scheme (it must start with scheme://)");
  std::string scheme = url.substr(0, sep);
  for (size_t i = 0; i < scheme.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(scheme[i]);
    bool ok = std::isalpha(c) || (i > 0 && (std::isdigit(c) || c == '+' || c == '-' || c == '.'));
    if (!ok) bad(url, "invalid scheme '" + scheme + "'");
    scheme[i] = static_cast<char>(std::tolower(c));
  }
  return scheme;
}

Url parse_url(const std::string& url) {
  Url u;
  u.text = url;
  u.scheme = url_scheme(url);
  std::string rest = url.substr(u.scheme.size() + 3);
  if (size_t hash = rest.find('#'); hash != std::string::npos)
    bad(url, "fragments ('#...') are not supported");

  std::string query;
  if (size_t q = rest.find('?'); q != std::string::npos) {
    query = rest.substr(q + 1);
    rest.resize(q);
  }
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) u.path = percent_decode(rest.substr(slash), url);

  if (authority.find('@') != std::string::npos)
    bad(url, "user information ('user@host') is not supported");
  std::string port_text;
  bool has_port = false;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string::npos) bad(url, "'[' of an IPv6 host is not closed by ']'");
    u.host = authority.substr(1, close - 1);
    if (u.host.empty()) bad(url, "empty IPv6 host '[]'");
    std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') bad(url, "unexpected '" + after + "' after the IPv6 host");
      port_text = after.substr(1);
      has_port = true;
    }
  } else {
    size_t colon = authority.find(':');
    if (colon != std::string::npos && authority.find(':', colon + 1) != std::string::npos)
      bad(url, "IPv6 hosts go in brackets, e.g. tcp://[::1]:29500");
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) {
      port_text = authority.substr(colon + 1);
      has_port = true;
    }
    if (u.host.find_first_of("[]") != std::string::npos) bad(url, "unbalanced ']' in the host");
  }
  u.host = percent_decode(u.host, url);
  if (has_port) {
    bool digits = !port_text.empty() && port_text.size() <= 5;
    for (char c : port_text) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    if (!digits || std::stoul(port_text) > 65535)
      bad(url, "bad port '" + port_text + "' (expected a number in 0..65535)");
    u.port = static_cast<uint16_t>(std::stoul(port_text));
  }

  size_t pos = 0;
  while (pos <= query.size() && !query.empty()) {
    size_t amp = query.find('&', pos);
    std::string item = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    if (!item.empty()) {
      size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0)
        bad(url, "bad query parameter '" + item + "' (expected name=value)");
      std::string name = percent_decode(item.substr(0, eq), url);
      std::string value = percent_decode(item.substr(eq + 1), url);
      if (!u.query.emplace(name, value).second)
        bad(url, "query parameter '" + name + "' is given twice");
    }
    if (amp == std::string::npos) break;
    pos = amp + 1;
  }
  return u;
}

}  // namespace tpcomm::rdzv
