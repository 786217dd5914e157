// Worker output: whole lines, each with its "[rank N]: " prefix, go to tprun's console in one
// write() per batch so that lines of different workers never mix; log files get the bytes
// as they come.
#include <string.h>

#include <string>

#include "core/log.h"
#include "launch/launch_internal.h"

namespace tpcomm::launch::detail {

void LineForwarder::emit(const char* line, size_t n, std::string* out) {
  out->append(prefix_);
  out->append(line, n);
  out->push_back('\n');
}

void LineForwarder::feed(const char* data, size_t n) {
  if (n == 0) return;
  if (file_fd_ >= 0 && !write_fully(file_fd_, data, n)) {
    TPLOG(WARN, LAUNCH) << "tprun: writing a worker log file failed: " << strerror(errno)
                        << "; no more output goes to it";
    file_fd_ = -1;
  }
  if (console_fd_ < 0) return;
  std::string out;
  const char* end = data + n;
  while (data < end) {
    const char* nl = static_cast<const char*>(memchr(data, '\n', static_cast<size_t>(end - data)));
    if (!nl) {
      pending_.append(data, static_cast<size_t>(end - data));
      if (pending_.size() >= kMaxLine) {
        emit(pending_.data(), pending_.size(), &out);
        pending_.clear();
      }
      break;
    }
    size_t len = static_cast<size_t>(nl - data);
    if (pending_.empty()) {
      emit(data, len, &out);
    } else {
      pending_.append(data, len);
      emit(pending_.data(), pending_.size(), &out);
      pending_.clear();
    }
    data = nl + 1;
  }
  // A closed console (tprun | head) must not stop the job: drop the output from then on.
  if (!out.empty() && !write_fully(console_fd_, out.data(), out.size())) console_fd_ = -1;
}

void LineForwarder::finish() {
  if (console_fd_ >= 0 && !pending_.empty()) {
    std::string out;
    emit(pending_.data(), pending_.size(), &out);
    if (!write_fully(console_fd_, out.data(), out.size())) console_fd_ = -1;
  }
  pending_.clear();
}

}  // namespace tpcomm::launch::detail
