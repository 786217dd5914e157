// FileStore: a store kept in one file, shared by processes through fcntl (POSIX record)
// locks, which also work on NFS, unlike flock. The file is an append-only log of checksummed
// records (format in file_store_log.h). Each process caches the state the log describes and
// reads only the bytes appended since its last look, so polling get()/wait() stays cheap.
//
// Reference counting follows torch's FileStore: every object adds 1 to an internal
// "refcount" on construction; on destruction it adds 1 to "cleanup" and -1 to "refcount", and
// when refcount reaches 0 with world_size > 0 and at least world_size objects closed, that
// last one deletes the file. A process killed before its destructor runs never decrements,
// so its file stays: delete it when the job is over (as with torch).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "core/config.h"
#include "core/deadline.h"
#include "core/log.h"
#include "store/file_store_log.h"
#include "store/store_util.h"
#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm {
namespace {

using filestore::LogState;
using filestore::Op;
using namespace std::chrono_literals;

constexpr uint64_t kReadWindow = 16u << 20;  // bytes read per pread when catching up
const std::string kRefCountKey = "refcount";
const std::string kCleanupKey = "cleanup";

std::string errno_text(int e) { return std::system_category().message(e); }

// All FileStore objects of this process on one file share one Inode. fcntl locks belong to
// the process: two fds of one process do not exclude each other, and closing any fd of the
// file drops every lock the process holds on it. So threads are serialized by `mu`, and fds
// are closed only when the last object of the process on that file goes.
struct Inode {
  std::mutex mu;
  int fd = -1;
  std::vector<int> spare_fds;  // duplicates opened by later objects; closed with fd
  dev_t dev = 0;
  ino_t ino = 0;
  int users = 0;  // guarded by the registry mutex
  // The cached state, guarded by mu. offset is the end of the last applied record, 0 before
  // the header has been read.
  LogState state;
  uint64_t offset = 0;
};

struct Registry {
  std::mutex mu;
  std::map<std::pair<dev_t, ino_t>, std::shared_ptr<Inode>> inodes;
};
Registry& registry() {
  static auto* r = new Registry;  // never destroyed: stores may close during static teardown
  return *r;
}

// Registers fd (open on the file described by sb); takes ownership of fd.
std::shared_ptr<Inode> acquire_inode(int fd, const struct stat& sb) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  auto& slot = r.inodes[{sb.st_dev, sb.st_ino}];
  if (slot) {
    // Reuse it unless it is a deleted file whose inode number was recycled.
    struct stat cur;
    if (::fstat(slot->fd, &cur) == 0 && cur.st_nlink > 0) {
      slot->spare_fds.push_back(fd);
      ++slot->users;
      return slot;
    }
  }
  slot = std::make_shared<Inode>();
  slot->fd = fd;
  slot->dev = sb.st_dev;
  slot->ino = sb.st_ino;
  slot->users = 1;
  return slot;
}

void release_inode(const std::shared_ptr<Inode>& in) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  if (--in->users > 0) return;
  auto it = r.inodes.find({in->dev, in->ino});
  if (it != r.inodes.end() && it->second == in) r.inodes.erase(it);
  // Closed under the registry mutex: a new object on this file cannot hold a lock yet.
  ::close(in->fd);
  for (int f : in->spare_fds) ::close(f);
  in->fd = -1;
  in->spare_fds.clear();
}

// Holds the process's mutex of the file and an fcntl lock on the whole file.
class FileLock {
 public:
  FileLock(Inode& in, bool exclusive, Deadline d, const std::string& path) : in_(in) {
    // try_lock with back-off rather than a timed mutex: the wait honours the deadline, and
    // ThreadSanitizer understands it.
    auto backoff = 5us;
    while (!in.mu.try_lock()) {
      if (d.expired()) {
        throw TimeoutError("FileStore '" + path +
                           "': another thread of this process held the file for longer than "
                           "the timeout; raise the store timeout if it is just slow");
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min<std::chrono::microseconds>(backoff * 2, 1ms);
    }
    std::unique_lock<std::mutex> guard(in.mu, std::adopt_lock);
    struct flock fl {};
    fl.l_type = exclusive ? F_WRLCK : F_RDLCK;
    fl.l_whence = SEEK_SET;
    backoff = 20us;
    while (::fcntl(in.fd, F_SETLK, &fl) != 0) {
      int e = errno;
      if (e == EINTR) continue;
      if (e != EACCES && e != EAGAIN) {
        throw StoreError(
            "FileStore '" + path + "': cannot lock the file with fcntl: " + errno_text(e) +
            (e == ENOLCK ? " (the file system does not support POSIX locks: an NFS mount with "
                           "'nolock' or without a lock daemon?); put the file on a file system "
                           "with working fcntl locks"
                         : ""));
      }
      if (d.expired()) {
        struct flock q {};
        q.l_type = F_WRLCK;
        q.l_whence = SEEK_SET;
        std::string who = "another process";
        if (::fcntl(in.fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK)
          who = "process " + std::to_string(q.l_pid);
        throw TimeoutError("FileStore '" + path +
                           "': could not lock the file before the "
                           "timeout; " +
                           who + " kept it locked (is it stopped or stuck?)");
      }
      auto left = d.when() - Deadline::Clock::now();
      std::this_thread::sleep_for(std::min<Deadline::Clock::duration>(backoff, left));
      backoff = std::min<std::chrono::microseconds>(backoff * 2, 2ms);
    }
    guard.release();
  }
  ~FileLock() {
    struct flock fl {};
    fl.l_type = F_UNLCK;
    fl.l_whence = SEEK_SET;
    while (::fcntl(in_.fd, F_SETLK, &fl) != 0 && errno == EINTR) {
    }
    in_.mu.unlock();
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  Inode& in_;
};

// Reads up to n bytes at off; returns the count (short only at end of file).
size_t pread_some(int fd, uint8_t* buf, size_t n, uint64_t off, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, buf + got, n - got, static_cast<off_t>(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw StoreError("FileStore '" + path + "': read failed at byte offset " +
                       std::to_string(off + got) + ": " + errno_text(errno));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

void pwrite_all(int fd, const uint8_t* buf, size_t n, uint64_t off, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pwrite(fd, buf + done, n - done, static_cast<off_t>(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      // Leave no partial record behind (best effort; the next writer would truncate it).
      if (::ftruncate(fd, static_cast<off_t>(off)) != 0) {
      }
      throw StoreError("FileStore '" + path + "': write of " + std::to_string(n) +
                       " bytes at byte offset " + std::to_string(off) + " failed: " +
                       errno_text(e) + (e == ENOSPC || e == EDQUOT ? "; free some space" : ""));
    }
    done += static_cast<size_t>(r);
  }
}

void truncate_to(int fd, uint64_t size, const std::string& path) {
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    throw StoreError("FileStore '" + path + "': cannot truncate to " + std::to_string(size) +
                     " bytes: " + errno_text(errno));
  }
}

// Brings the cache of `in` up to date with the file; the caller holds a FileLock (exclusive
// when `writing`). A writer also writes a missing header and truncates a torn tail.
void refresh(Inode& in, bool writing, const std::string& path) {
  struct stat sb;
  if (::fstat(in.fd, &sb) != 0)
    throw StoreError("FileStore '" + path + "': fstat failed: " + errno_text(errno));
  uint64_t size = static_cast<uint64_t>(sb.st_size);
  if (in.offset == 0) {
    uint8_t hb[filestore::kFileHeaderSize];
    size_t n = pread_some(in.fd, hb, std::min<uint64_t>(size, sizeof(hb)), 0, path);
    auto hs =
        n == 0 ? filestore::HeaderStatus::kIncomplete : filestore::check_file_header(hb, n, path);
    if (hs == filestore::HeaderStatus::kIncomplete) {
      in.state = LogState{};
      if (!writing) return;  // not created yet: an empty store
      if (n > 0) {
        TPLOG(WARN, STORE) << "FileStore '" << path << "': rewriting a header of " << n
                           << " bytes left by a creator that died while writing it";
        truncate_to(in.fd, 0, path);
      }
      Bytes h = filestore::encode_file_header();
      pwrite_all(in.fd, h.data(), h.size(), 0, path);
      in.offset = h.size();
      return;
    }
    in.state = LogState{};
    in.offset = filestore::kFileHeaderSize;
  }
  if (size < in.offset) {
    uint64_t had = in.offset;
    in.offset = 0;
    in.state = LogState{};
    throw StoreError("FileStore '" + path + "' shrank from " + std::to_string(had) + " to " +
                     std::to_string(size) +
                     " bytes while in use: another program truncated or rewrote it. Delete the "
                     "file and restart the job.");
  }
  uint64_t pos = in.offset;
  uint64_t window = kReadWindow;
  Bytes buf;
  try {
    while (pos < size) {
      uint64_t want = std::min(size - pos, window);
      buf.resize(want);
      size_t got = pread_some(in.fd, buf.data(), want, pos, path);
      bool at_eof = pos + got >= size;
      auto r = filestore::apply_records(buf.data(), got, pos, at_eof, path, &in.state);
      pos += r.consumed;
      if (at_eof && r.consumed < got) break;  // a torn tail
      window = std::max(kReadWindow, r.needed);
    }
  } catch (const StoreError&) {
    in.offset = 0;  // the state may hold part of the failed stretch: forget it all
    in.state = LogState{};
    throw;
  }
  in.offset = pos;
  if (writing && pos < size) {
    TPLOG(WARN, STORE) << "FileStore '" << path << "': discarding an incomplete record of "
                       << (size - pos) << " bytes at byte offset " << pos
                       << " (its writer was killed while writing it)";
    truncate_to(in.fd, pos, path);
  }
}

// Appends one encoded record at the end of the valid log and applies it to the cache.
void write_record(Inode& in, const Bytes& rec, const std::string& path) {
  pwrite_all(in.fd, rec.data(), rec.size(), in.offset, path);
  filestore::apply_records(rec.data(), rec.size(), in.offset, true, path, &in.state);
  in.offset += rec.size();
}

int64_t meta_counter(const Inode& in, const std::string& key) {
  auto it = in.state.meta.find(key);
  if (it == in.state.meta.end()) return 0;
  return store_util::parse_counter(it->second).value_or(0);
}

std::string show_key(const std::string& key) {
  return key.size() <= 64 ? key : key.substr(0, 64) + "...";
}

// Opens (creating) the store file, with a message that says what to do on failure.
int open_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) return fd;
  int e = errno;
  std::string msg = "FileStore: cannot open '" + path + "': " + errno_text(e);
  if (e == ENOENT) {
    size_t slash = path.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    msg += "; the directory '" + dir +
           "' does not exist: create it first (on a file system every rank can reach)";
  } else if (e == EACCES || e == EROFS) {
    msg += "; every rank needs read and write access to the file and its directory";
  } else if (e == EISDIR) {
    msg += "; the path names a directory: pass the path of a file inside it";
  }
  throw StoreError(msg);
}

}  // namespace

struct FileStore::State {
  std::shared_ptr<Inode> inode;
  uint64_t max_key = 0;
  uint64_t max_value = 0;

  void check_key(const std::string& key, const char* op) const {
    if (key.size() > max_key) {
      throw StoreError(std::string("FileStore::") + op + "('" + show_key(key) + "'): the key has " +
                       std::to_string(key.size()) +
                       " bytes, more than TPCOMM_STORE_MAX_KEY=" + std::to_string(max_key) +
                       " bytes; use a shorter key or raise TPCOMM_STORE_MAX_KEY");
    }
  }
  void check_value(const std::string& key, size_t n, const char* op) const {
    if (n > max_value) {
      throw StoreError(std::string("FileStore::") + op + "('" + show_key(key) +
                       "'): the value has " + std::to_string(n) +
                       " bytes, more than TPCOMM_STORE_MAX_VALUE=" + std::to_string(max_value) +
                       " bytes; store less or raise TPCOMM_STORE_MAX_VALUE");
    }
  }
};

FileStore::FileStore(std::string path, int world_size)
    : path_(std::move(path)), world_size_(world_size), state_(std::make_unique<State>()) {
  if (path_.empty())
    throw InvalidArgument(
        "FileStore: the path is empty; pass the path of a file that every rank "
        "can reach");
  if (world_size_ == 0 || world_size_ < -1) {
    throw InvalidArgument("FileStore('" + path_ + "'): world_size " + std::to_string(world_size_) +
                          " is invalid; pass the number of processes sharing the file, or -1 "
                          "when it is not known (the file is then never deleted)");
  }
  state_->max_key = config::get_size("TPCOMM_STORE_MAX_KEY");
  state_->max_value = config::get_size("TPCOMM_STORE_MAX_VALUE");
  Deadline d = Deadline::after(timeout_);
  for (int attempt = 0;; ++attempt) {
    int fd = open_file(path_);
    struct stat sb;
    if (::fstat(fd, &sb) != 0) {
      int e = errno;
      ::close(fd);
      throw StoreError("FileStore '" + path_ + "': fstat failed: " + errno_text(e));
    }
    if (!S_ISREG(sb.st_mode)) {
      ::close(fd);
      throw StoreError("FileStore '" + path_ + "' is not a regular file; pass a file path");
    }
    std::shared_ptr<Inode> in = acquire_inode(fd, sb);
    try {
      FileLock lk(*in, true, d, path_);
      // The last user of an earlier store may have deleted the file between open and lock.
      struct stat ps;
      if (::stat(path_.c_str(), &ps) != 0 || ps.st_dev != in->dev || ps.st_ino != in->ino) {
        if (attempt >= 100 || d.expired()) {
          throw StoreError("FileStore '" + path_ +
                           "': the file keeps being deleted or replaced "
                           "while opening it; is another job using the same path?");
        }
        release_inode(in);
        continue;
      }
      refresh(*in, true, path_);
      Bytes rec;
      std::string keys[] = {kRefCountKey};
      Bytes vals[] = {store_util::encode_counter(meta_counter(*in, kRefCountKey) + 1)};
      filestore::encode_record(Op::kMetaSet, keys, vals, &rec);
      write_record(*in, rec, path_);
    } catch (...) {
      release_inode(in);
      throw;
    }
    state_->inode = std::move(in);
    break;
  }
  TPLOG(INFO, STORE) << "FileStore '" << path_ << "' opened (world_size " << world_size_ << ")";
}

FileStore::~FileStore() {
  if (!state_ || !state_->inode) return;
  Inode& in = *state_->inode;
  try {
    FileLock lk(in, true, Deadline::after(std::min<std::chrono::milliseconds>(timeout_, 60s)),
                path_);
    refresh(in, true, path_);
    int64_t finished = meta_counter(in, kCleanupKey) + 1;
    int64_t refs = meta_counter(in, kRefCountKey) - 1;
    Bytes rec;
    std::string keys[] = {kCleanupKey, kRefCountKey};
    Bytes vals[] = {store_util::encode_counter(finished), store_util::encode_counter(refs)};
    filestore::encode_record(Op::kMetaSet, keys, vals, &rec);
    write_record(in, rec, path_);
    if (refs <= 0 && world_size_ > 0 && finished >= world_size_) {
      struct stat ps;
      if (::stat(path_.c_str(), &ps) == 0 && ps.st_dev == in.dev && ps.st_ino == in.ino) {
        ::unlink(path_.c_str());
        TPLOG(INFO, STORE) << "FileStore '" << path_ << "': last of " << world_size_
                           << " users closed it; file removed";
      }
    }
  } catch (const std::exception& e) {
    TPLOG(WARN, STORE) << "FileStore '" << path_ << "': could not update its reference count on "
                       << "close (" << e.what() << "); the file stays: delete it after the job";
  }
  release_inode(state_->inode);
}

void FileStore::set(const std::string& key, const Bytes& value) { multi_set({key}, {value}); }

Bytes FileStore::get(const std::string& key) { return multi_get({key}).front(); }

int64_t FileStore::add(const std::string& key, int64_t delta) {
  state_->check_key(key, "add");
  Inode& in = *state_->inode;
  FileLock lk(in, true, Deadline::after(timeout_), path_);
  refresh(in, true, path_);
  auto it = in.state.data.find(key);
  int64_t v = store_util::apply_add(key, it == in.state.data.end() ? nullptr : &it->second, delta);
  Bytes rec;
  std::string keys[] = {key};
  Bytes vals[] = {store_util::encode_counter(v)};
  filestore::encode_record(Op::kSet, keys, vals, &rec);
  write_record(in, rec, path_);
  return v;
}

Bytes FileStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  state_->check_key(key, "compare_set");
  state_->check_value(key, desired.size(), "compare_set");
  Inode& in = *state_->inode;
  FileLock lk(in, true, Deadline::after(timeout_), path_);
  refresh(in, true, path_);
  auto it = in.state.data.find(key);
  auto [to_store, ret] = store_util::apply_compare_set(
      it == in.state.data.end() ? nullptr : &it->second, expected, desired);
  if (to_store) {
    Bytes rec;
    std::string keys[] = {key};
    filestore::encode_record(Op::kSet, keys, std::span<const Bytes>(&*to_store, 1), &rec);
    write_record(in, rec, path_);
  }
  return ret;
}

bool FileStore::delete_key(const std::string& key) {
  state_->check_key(key, "delete_key");
  Inode& in = *state_->inode;
  FileLock lk(in, true, Deadline::after(timeout_), path_);
  refresh(in, true, path_);
  if (!in.state.data.count(key)) return false;
  Bytes rec;
  std::string keys[] = {key};
  filestore::encode_record(Op::kDelete, keys, {}, &rec);
  write_record(in, rec, path_);
  return true;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) state_->check_key(k, "check");
  Inode& in = *state_->inode;
  FileLock lk(in, false, Deadline::after(timeout_), path_);
  refresh(in, false, path_);
  for (const auto& k : keys)
    if (!in.state.data.count(k)) return false;
  return true;
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const auto& k : keys) state_->check_key(k, "wait");
  Inode& in = *state_->inode;
  Deadline d = Deadline::after(timeout);
  auto backoff = std::chrono::microseconds(100);
  while (true) {
    std::vector<std::string> missing;
    {
      FileLock lk(in, false, d, path_);
      refresh(in, false, path_);
      for (const auto& k : keys)
        if (!in.state.data.count(k)) missing.push_back(k);
    }
    if (missing.empty()) return;
    if (d.expired()) {
      throw TimeoutError(store_util::missing_keys_message("FileStore::wait on '" + path_ + "'",
                                                          missing, keys.size(), timeout));
    }
    std::this_thread::sleep_for(
        std::min<Deadline::Clock::duration>(backoff, d.when() - Deadline::Clock::now()));
    backoff = std::min<std::chrono::microseconds>(backoff * 2, 10ms);
  }
}

int64_t FileStore::num_keys() {
  Inode& in = *state_->inode;
  FileLock lk(in, false, Deadline::after(timeout_), path_);
  refresh(in, false, path_);
  return static_cast<int64_t>(in.state.data.size());
}

void FileStore::append(const std::string& key, const Bytes& value) {
  state_->check_key(key, "append");
  state_->check_value(key, value.size(), "append");
  Inode& in = *state_->inode;
  FileLock lk(in, true, Deadline::after(timeout_), path_);
  refresh(in, true, path_);
  auto it = in.state.data.find(key);
  state_->check_value(key, (it == in.state.data.end() ? 0 : it->second.size()) + value.size(),
                      "append");
  Bytes rec;
  std::string keys[] = {key};
  filestore::encode_record(Op::kAppend, keys, std::span<const Bytes>(&value, 1), &rec);
  write_record(in, rec, path_);
}

std::vector<Bytes> FileStore::multi_get(const std::vector<std::string>& keys) {
  for (const auto& k : keys) state_->check_key(k, "get");
  Inode& in = *state_->inode;
  Deadline d = Deadline::after(timeout_);
  auto backoff = std::chrono::microseconds(100);
  while (true) {
    std::vector<std::string> missing;
    std::vector<Bytes> out;
    {
      FileLock lk(in, false, d, path_);
      refresh(in, false, path_);
      for (const auto& k : keys) {
        auto it = in.state.data.find(k);
        if (it == in.state.data.end()) {
          missing.push_back(k);
        } else if (missing.empty()) {
          out.push_back(it->second);
        }
      }
    }
    if (missing.empty()) return out;
    if (d.expired()) {
      throw TimeoutError(store_util::missing_keys_message(
          std::string(keys.size() == 1 ? "FileStore::get" : "FileStore::multi_get") + " on '" +
              path_ + "'",
          missing, keys.size(), timeout_));
    }
    std::this_thread::sleep_for(
        std::min<Deadline::Clock::duration>(backoff, d.when() - Deadline::Clock::now()));
    backoff = std::min<std::chrono::microseconds>(backoff * 2, 10ms);
  }
}

void FileStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  store_util::check_multi_set(keys, values);
  for (size_t i = 0; i < keys.size(); ++i) {
    state_->check_key(keys[i], keys.size() == 1 ? "set" : "multi_set");
    state_->check_value(keys[i], values[i].size(), keys.size() == 1 ? "set" : "multi_set");
  }
  if (keys.empty()) return;
  Bytes rec;
  filestore::encode_record(Op::kSet, keys, values, &rec);
  Inode& in = *state_->inode;
  FileLock lk(in, true, Deadline::after(timeout_), path_);
  refresh(in, true, path_);
  write_record(in, rec, path_);
}

}  // namespace tpcomm
